"""Settings of the traffic series (issue 26): the bounded ring every frontend keeps for the Dashboard
(`GET /api/traffic`), sampled from its own counters and merged with the other frontends' over NATS."""

from __future__ import annotations

from corral.config.parse import parse_duration_s
from corral.config.settings import setting, settings_class

TRAFFIC_INTERVAL_MIN_S = 0.25  # below it the ring (an hour of points) and the NATS samples grow for no reader
TRAFFIC_INTERVAL_MAX_S = 300.0  # above it an hour holds under 12 points: no longer a chart


def parse_traffic_interval_s(raw: str) -> float:
    value = parse_duration_s(raw)
    if not TRAFFIC_INTERVAL_MIN_S <= value <= TRAFFIC_INTERVAL_MAX_S:
        raise ValueError(f"{raw!r} must be a duration from 250ms to 5m, e.g. 5s")
    return value


@settings_class
class FrontendTrafficSettings:
    """The traffic series shown on the Dashboard."""

    traffic_sample_interval_s: float = setting(
        "--traffic-sample-interval",
        "CORRAL_TRAFFIC_SAMPLE_INTERVAL",
        default=5.0,
        parse=parse_traffic_interval_s,
        help="how often each frontend samples its request, latency, token, queue and load figures and the nodes' "
        "memory and disk, and shares the sample with the other frontends; the last hour is kept in memory "
        "(GET /api/traffic); every frontend must use the same interval",
    )
