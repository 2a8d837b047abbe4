"""Declarative settings: one table per command; each entry has its flag, env vars, default and help.

Precedence: command-line flag, then the first env var that is set, then the default. A
missing required setting or a value that does not parse raises ConfigError naming the flag
and env var, so the process stops with one line and no traceback.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from corral.config.errors import ConfigError
from corral.config.parse import format_duration_s, parse_duration_s, parse_positive_duration_s

T = TypeVar("T")


def _identity(raw: str) -> str:
    return raw


@dataclass(frozen=True)
class Setting:
    name: str
    flag: str
    env: tuple[str, ...] = ()
    default: Any = None
    parse: Callable[[str], Any] = _identity
    help: str = ""
    required: bool = False
    is_switch: bool = False  # a boolean flag that may be given without a value
    secret: bool = False  # never shown in --help defaults or logs
    positional: bool = False  # an argument without a flag (`flag` is then its metavar, e.g. NAME)

    def describe(self) -> str:
        env = ", ".join(f"${e}" for e in self.env) or "no env var"
        if self.required:
            default = "required"
        elif self.secret:
            default = "default: unset"
        elif isinstance(self.default, float) and self.parse in (parse_duration_s, parse_positive_duration_s):
            default = f"default: {format_duration_s(self.default)}"
        else:
            default = f"default: {self.default!r}" if self.default not in (None, "", ()) else "default: unset"
        return f"{self.help} [{env}; {default}]".replace("%", "%%")  # argparse formats help with %


@dataclass
class Settings:
    """Resolved values by setting name, plus where each came from (for error messages)."""

    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None


def build_parser(
    prog: str,
    description: str,
    table: Sequence[Setting],
    parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser,
) -> argparse.ArgumentParser:
    parser = parser_class(
        prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    for setting in table:
        if setting.positional:
            parser.add_argument(
                setting.name, metavar=setting.flag, nargs="?", default=None, help=setting.describe()
            )
        elif setting.is_switch:
            parser.add_argument(
                setting.flag,
                dest=setting.name,
                nargs="?",
                const="true",
                default=None,
                help=setting.describe(),
            )
        else:
            parser.add_argument(
                setting.flag,
                dest=setting.name,
                default=None,
                help=setting.describe(),
                metavar=setting.flag.lstrip("-").upper().replace("-", "_"),
            )
    return parser


def resolve(
    table: Sequence[Setting], cli_values: Mapping[str, str | None], environ: Mapping[str, str]
) -> Settings:
    settings = Settings()
    for setting in table:
        raw, source = cli_values.get(setting.name), setting.flag
        if raw is None:
            for env in setting.env:
                if environ.get(env, "") != "":
                    raw, source = environ[env], f"${env}"
                    break
        label = " / ".join([setting.flag, *(f"${e}" for e in setting.env)])
        if raw is None:
            if setting.required:
                raise ConfigError(f"missing required setting {label}: {setting.help}")
            settings.values[setting.name] = setting.default
            settings.sources[setting.name] = "default"
            continue
        try:
            settings.values[setting.name] = setting.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"invalid {label} (from {source}): {exc}") from None
        settings.sources[setting.name] = source
    return settings


def load(
    prog: str,
    description: str,
    table: Sequence[Setting],
    argv: Sequence[str],
    environ: Mapping[str, str] | None = None,
    parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser,
) -> Settings:
    parser = build_parser(prog, description, table, parser_class)
    namespace = parser.parse_args(list(argv))
    return resolve(table, vars(namespace), os.environ if environ is None else environ)


def load_typed(
    into: type[T],
    prog: str,
    description: str,
    table: Sequence[Setting],
    argv: Sequence[str],
    environ: Mapping[str, str] | None = None,
    parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser,
) -> T:
    """`load`, returned as the command's frozen, typed settings object (config/commands.py)."""
    return into(**load(prog, description, table, argv, environ, parser_class).values)
