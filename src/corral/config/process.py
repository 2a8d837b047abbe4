"""Settings every long-running corral process shares (frontend and worker): event-loop watch, HTTP processes."""

from __future__ import annotations

from corral.config.parse import parse_int
from corral.config.settings import setting, settings_class

MAX_HTTP_WORKERS = 64


def parse_slow_callback_ms(raw: str) -> int:
    value = parse_int(raw)
    if not 1 <= value <= 60_000:
        raise ValueError(f"slow-callback threshold {raw!r} ms is out of range; use 1 to 60000")
    return value


def parse_http_workers(raw: str) -> int:
    value = parse_int(raw)
    if not 1 <= value <= MAX_HTTP_WORKERS:
        raise ValueError(f"http workers {raw!r} is out of range; use 1 to {MAX_HTTP_WORKERS}")
    return value


@settings_class
class ProcessSettings:
    """What every long-running process has: the event-loop watch."""

    slow_callback_ms: int = setting(
        "--slow-callback-ms",
        "CORRAL_SLOW_CALLBACK_MS",
        default=100,
        parse=parse_slow_callback_ms,
        help="an event-loop stall longer than this many ms is logged with the blocking stack and counted in "
        "corral_event_loop_stalls_total",
    )
