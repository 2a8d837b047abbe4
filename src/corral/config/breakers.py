"""Settings of circuit breakers and retries of backend calls (routing/breaker.py), mixed into the frontend's settings (issue 25).

A replica whose calls fail `--breaker-failures` times in a row (within `--breaker-window`) is taken out of picking
for `--breaker-cooldown`, then let through for one trial request; each failed trial doubles the cooldown up to
`--breaker-cooldown-max`. Breakers are per frontend: each frontend judges the replicas by its own calls.
A call that fails before its first byte is retried on another replica up to `--backend-retries` times, after a
jittered backoff that starts at `--backend-retry-backoff` and doubles, within the call's own budget.
"""

from __future__ import annotations

from corral.config.parse import parse_non_negative_int, parse_positive_duration_s, parse_positive_int
from corral.config.settings import setting, settings_class


@settings_class
class FrontendBreakerSettings:
    """circuit breakers and retries of backend calls (routing/breaker.py)."""

    breaker_failures: int = setting(
        "--breaker-failures",
        "CORRAL_BREAKER_FAILURES",
        default=3,
        parse=parse_positive_int,
        help="failed calls in a row (connection failures, UNAVAILABLE, timeouts, backend errors; not refused "
        "requests) after which a replica is taken out of picking on this frontend for the cooldown",
    )
    breaker_window_s: float = setting(
        "--breaker-window",
        "CORRAL_BREAKER_WINDOW",
        default=60.0,
        parse=parse_positive_duration_s,
        help="the failures in a row must fall within this window of the first one to open the breaker",
    )
    breaker_cooldown_s: float = setting(
        "--breaker-cooldown",
        "CORRAL_BREAKER_COOLDOWN",
        default=30.0,
        parse=parse_positive_duration_s,
        help="how long an open breaker keeps its replica out of picking before one trial request is let through",
    )
    breaker_cooldown_max_s: float = setting(
        "--breaker-cooldown-max",
        "CORRAL_BREAKER_COOLDOWN_MAX",
        default=300.0,
        parse=parse_positive_duration_s,
        help="each failed trial doubles the cooldown, up to this",
    )
    backend_retries: int = setting(
        "--backend-retries",
        "CORRAL_BACKEND_RETRIES",
        default=2,
        parse=parse_non_negative_int,
        help="retries of a backend call that failed before its first byte (connection failure, replica gone, "
        "breaker opened), each on another replica when there is one; never after a byte reached the client",
    )
    backend_retry_backoff_s: float = setting(
        "--backend-retry-backoff",
        "CORRAL_BACKEND_RETRY_BACKOFF",
        default=0.05,
        parse=parse_positive_duration_s,
        help="pause before the first retry (jittered), doubling for each further one, within the call's budget",
    )
