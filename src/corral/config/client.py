"""Settings of the operator's commands (`corral nodes`, `models`, `activity`): which frontend, which key."""

from __future__ import annotations

from urllib.parse import urlparse

from corral.config.parse import parse_bool, parse_positive_duration_s
from corral.config.settings import Setting

DEFAULT_URL = "http://127.0.0.1:8080"


def parse_frontend_url(raw: str) -> str:
    url = raw.strip().rstrip("/")
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"{raw!r} is not a frontend URL; use http://HOST:PORT, e.g. {DEFAULT_URL}")
    return url


CLIENT_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "url", "--url", ("CORRAL_URL",), DEFAULT_URL, parse_frontend_url, "the frontend (`corral run`) to ask"
    ),
    Setting(
        "api_key",
        "--api-key",
        ("CORRAL_API_KEY", "LOCALAI_API_KEY"),
        "",
        help="admin API key, sent as Authorization: Bearer",
        secret=True,
    ),
    Setting(
        "timeout_s",
        "--timeout",
        ("CORRAL_CLI_TIMEOUT",),
        30.0,
        parse_positive_duration_s,
        "how long one HTTP request to the frontend may take",
    ),
    Setting(
        "json", "--json", (), False, parse_bool, "print the API's JSON instead of a table", is_switch=True
    ),
)

ACTIVITY_SETTINGS: tuple[Setting, ...] = (
    *CLIENT_SETTINGS,
    Setting(
        "history",
        "--history",
        (),
        False,
        parse_bool,
        "also list finished operations (the record)",
        is_switch=True,
    ),
)

LOAD_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "model",
        "NAME",
        (),
        None,
        help="the configured model (or alias) to load",
        required=True,
        positional=True,
    ),
    *CLIENT_SETTINGS,
    Setting(
        "follow",
        "--follow",
        (),
        False,
        parse_bool,
        "follow the load until the model is ready: a progress bar on a terminal, a line per step otherwise",
        is_switch=True,
    ),
    Setting(
        "follow_timeout_s",
        "--follow-timeout",
        ("CORRAL_FOLLOW_TIMEOUT",),
        1800.0,
        parse_positive_duration_s,
        "stop following after this long (the load itself goes on)",
    ),
)
