"""Configuration errors: each names the setting (flag and env var) and what is wrong with it."""


class ConfigError(Exception):
    """A setting is missing or malformed; the message names the flag/env var and the fix."""
