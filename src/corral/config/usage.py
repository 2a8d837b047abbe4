"""Settings of usage accounting: batched writes of per key x model x hour counts, mixed into the frontend's settings
(issue 25). The ledger (tenancy/ledger.py) counts in memory and writes once per interval, never per request."""

from __future__ import annotations

from corral.config.parse import parse_duration_s, parse_positive_duration_s, parse_positive_int
from corral.config.settings import setting, settings_class


def _retention_s(raw: str) -> float:
    value = parse_duration_s(raw)
    if value < 0:
        raise ValueError(f"{raw!r} must be a duration (e.g. 400d), or 0 to keep usage forever")
    return value


@settings_class
class FrontendUsageSettings:
    """usage accounting: batched writes of per key x model x hour counts."""

    usage_flush_interval_s: float = setting(
        "--usage-flush-interval",
        "CORRAL_USAGE_FLUSH_INTERVAL",
        default=5.0,
        parse=parse_positive_duration_s,
        help="how often this frontend writes the usage it counted (per key x model x hour) to PostgreSQL, in one "
        "statement, and re-reads every key's day and month totals for quotas; quotas see the other frontends' "
        "usage at most about this late",
    )
    usage_max_pending: int = setting(
        "--usage-max-pending",
        "CORRAL_USAGE_MAX_PENDING",
        default=100_000,
        parse=parse_positive_int,
        help="key x model x hour usage rows kept in memory while PostgreSQL cannot take them; past it the oldest "
        "are dropped with a warning (metric corral_usage_dropped_rows_total)",
    )
    usage_retention_s: float = setting(
        "--usage-retention",
        "CORRAL_USAGE_RETENTION",
        default=400 * 86400.0,
        parse=_retention_s,
        help="how long the per key x model x hour usage rows are kept (e.g. 400d, 90d); older ones are deleted "
        "hourly; 0 keeps them forever. The day totals of the current and last month's quotas are always kept",
    )
