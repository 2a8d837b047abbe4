"""Settings of the operator's commands (`corral nodes`, `models`, `activity`): which frontend, which key."""

from __future__ import annotations

from urllib.parse import urlparse

from corral.config.parse import parse_bool, parse_positive_duration_s
from corral.config.settings import setting, settings_class

DEFAULT_URL = "http://127.0.0.1:8080"


def parse_frontend_url(raw: str) -> str:
    url = raw.strip().rstrip("/")
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"{raw!r} is not a frontend URL; use http://HOST:PORT, e.g. {DEFAULT_URL}")
    return url


@settings_class
class ClientSettings:
    """`corral nodes`, `corral models`: which frontend, which key (and every operator command's)."""

    url: str = setting(
        "--url",
        "CORRAL_URL",
        default=DEFAULT_URL,
        parse=parse_frontend_url,
        help="the frontend (`corral run`) to ask",
    )
    api_key: str = setting(
        "--api-key",
        ("CORRAL_API_KEY", "LOCALAI_API_KEY"),
        default="",
        help="admin API key, sent as Authorization: Bearer",
        secret=True,
    )
    timeout_s: float = setting(
        "--timeout",
        "CORRAL_CLI_TIMEOUT",
        default=30.0,
        parse=parse_positive_duration_s,
        help="how long one HTTP request to the frontend may take",
    )
    json: bool = setting(
        "--json",
        default=False,
        parse=parse_bool,
        help="print the API's JSON instead of a table",
        is_switch=True,
    )


@settings_class
class HistorySettings:
    """What `corral activity` lists."""

    history: bool = setting(
        "--history",
        default=False,
        parse=parse_bool,
        help="also list finished operations (the record)",
        is_switch=True,
    )


@settings_class
class ActivitySettings(ClientSettings, HistorySettings):
    """`corral activity`."""


@settings_class
class FollowSettings:
    """Following a load."""

    follow: bool = setting(
        "--follow",
        default=False,
        parse=parse_bool,
        help="follow the load until the model is ready: a progress bar on a terminal, a line per step otherwise",
        is_switch=True,
    )
    follow_timeout_s: float = setting(
        "--follow-timeout",
        "CORRAL_FOLLOW_TIMEOUT",
        default=1800.0,
        parse=parse_positive_duration_s,
        help="stop following after this long (the load itself goes on)",
    )


@settings_class
class ModelLoadSettings(ClientSettings, FollowSettings):
    """`corral models load`."""

    model: str = setting(
        "NAME", help="the configured model (or alias) to load", required=True, positional=True
    )
