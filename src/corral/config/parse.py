"""Parsing of setting values: durations, sizes, booleans, host:port addresses, database URLs.

Every parser takes the raw string and returns the value or raises ValueError with a short
reason; the settings loader prefixes the setting's name.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from urllib.parse import urlparse

_DURATION_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h|d)")
_DURATION_UNIT_S = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,  # beyond Go's units: retentions are said in days
}


def parse_duration_s(raw: str) -> float:
    """Parse a Go-style duration (`90s`, `5m`, `1h30m`, `250ms`; also days, `30d`) or bare seconds into seconds."""
    text = raw.strip()
    if not text:
        raise ValueError("empty duration; use e.g. 30s, 5m or 1h")
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if math.isnan(seconds):
            raise ValueError(f"{raw!r} is not a duration; use e.g. 30s, 5m or 1h")
        return seconds
    pos, total_s = 0, 0.0
    for match in _DURATION_RE.finditer(text):
        if match.start() != pos:
            break
        total_s += float(match.group(1)) * _DURATION_UNIT_S[match.group(2)]
        pos = match.end()
    if pos != len(text) or pos == 0:
        raise ValueError(f"{raw!r} is not a duration; use e.g. 30s, 5m or 1h")
    return total_s


def parse_positive_duration_s(raw: str) -> float:
    """A duration longer than zero (a deadline or a window: 0 would refuse everything)."""
    value = parse_duration_s(raw)
    if value <= 0:
        raise ValueError(f"{raw!r} must be a positive duration, e.g. 30s")
    return value


def format_duration_s(seconds: float) -> str:
    """Format seconds the way operators write them: `90s` → `1m30s`, `0.25` → `250ms`."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else "", f"{secs}s" if secs else ""]
    return "".join(parts) or "0s"


_TRUE = {"1", "true", "yes", "on", "y", "t"}
_FALSE = {"0", "false", "no", "off", "n", "f", ""}


def parse_bool(raw: str) -> bool:
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{raw!r} is not a boolean; use true or false")


def parse_int(raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise ValueError(f"{raw!r} is not an integer") from None


def parse_positive_int(raw: str) -> int:
    value = parse_int(raw)
    if value < 1:
        raise ValueError(f"{raw!r} must be a positive number")
    return value


def parse_non_negative_int(raw: str) -> int:
    value = parse_int(raw)
    if value < 0:
        raise ValueError(f"{raw!r} must be 0 or more")
    return value


def parse_port(raw: str) -> int:
    value = parse_int(raw)
    if not 1 <= value <= 65535:
        raise ValueError(f"{value} is not a TCP port (1-65535)")
    return value


def parse_host_port(raw: str) -> tuple[str, int]:
    """Parse `host:port` (host may be empty, meaning all interfaces) into (host, port)."""
    text = raw.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep:
        raise ValueError(f"{raw!r} is not host:port; use e.g. 0.0.0.0:50051")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"{raw!r} has a non-numeric port; use e.g. 0.0.0.0:50051") from None
    if not 1 <= port <= 65535:
        raise ValueError(f"{raw!r} has port {port} outside 1-65535")
    return host.strip("[]"), port


def parse_postgres_url(raw: str) -> str:
    text = raw.strip()
    if not text.startswith(("postgres://", "postgresql://")):
        raise ValueError(f"{text!r} is not a PostgreSQL URL; use postgresql://user@host:5432/dbname")
    if not urlparse(text).path.strip("/"):
        raise ValueError(f"{text!r} names no database; add /dbname")
    return text


def parse_optional_postgres_url(raw: str) -> str:
    """A PostgreSQL URL, or "" (unset) for a blank value."""
    return parse_postgres_url(raw) if raw.strip() else ""


def parse_nats_url(raw: str) -> str:
    text = raw.strip()
    for url in text.split(","):
        if not url.strip().startswith(("nats://", "tls://", "ws://", "wss://")):
            raise ValueError(f"{url!r} is not a NATS URL; use nats://host:4222 (or tls://)")
    return text


def parse_http_url(raw: str) -> str:
    text = raw.strip().rstrip("/")
    parsed = urlparse(text)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"{raw!r} is not an http(s) URL; use e.g. http://frontend:8080")
    return text


def parse_optional_http_url(raw: str) -> str:
    """An http(s) URL, or "" (unset) for a blank value."""
    return parse_http_url(raw) if raw.strip() else ""


def parse_path(raw: str) -> Path:
    if not raw.strip():
        raise ValueError("empty path")
    return Path(raw.strip()).expanduser()


def parse_path_list(raw: str) -> tuple[Path, ...]:
    """Absolute directories separated by the system's path separator (':') or commas; empty = none."""
    paths = []
    for part in re.split(f"[,{re.escape(os.pathsep)}]", raw):
        if not part.strip():
            continue
        path = Path(part.strip()).expanduser()
        if not path.is_absolute():
            raise ValueError(f"{part.strip()!r} is not an absolute path; list directories as /abs/dir")
        paths.append(path)
    return tuple(paths)


def parse_labels(raw: str) -> dict[str, str]:
    """Parse `k=v,k2=v2` node labels."""
    labels: dict[str, str] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"label {item!r} is not key=value")
        labels[key.strip()] = value.strip()
    return labels
