"""`localai_control_plane_oldest_xmin_age`: transactions since the oldest snapshot still held
open against the control-plane database (OpenTelemetry meter, exported on `/metrics`).

A line that climbs without coming back down means something holds a transaction open and
autovacuum can no longer reclaim the node registry.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from urllib.parse import urlparse

import asyncpg
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider

from corral.runtime.loops import run_periodic

log = logging.getLogger(__name__)

GAUGE_NAME = "localai_control_plane_oldest_xmin_age"
SAMPLE_INTERVAL_S = 15.0
OLDEST_XMIN_AGE_SQL = (
    "SELECT COALESCE(max(age(backend_xmin)), 0) FROM pg_stat_activity "
    "WHERE datname = current_database() AND backend_xmin IS NOT NULL"
)


class XminAgeSampler:
    def __init__(self, pool: asyncpg.Pool, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.pool, self.interval_s = pool, interval_s
        self.value: int | None = None

    async def sample(self) -> int:
        self.value = int(await self.pool.fetchval(OLDEST_XMIN_AGE_SQL))
        return self.value

    async def run(self, stop: asyncio.Event) -> None:
        await run_periodic(f"{GAUGE_NAME} sampler", self.sample, self.interval_s, stop)


_samplers: list[XminAgeSampler] = []
_registered = False


def register_gauge(sampler: XminAgeSampler) -> None:
    """Expose the sampler's value as an OpenTelemetry observable gauge read by the Prometheus exporter.

    The meter provider and its Prometheus reader are process-wide (the Prometheus registry is),
    so they are created once; later frontends in the same process just add their sampler.
    """
    global _registered
    _samplers.append(sampler)
    if _registered:
        return

    def observe(_options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(s.value) for s in _samplers[-1:] if s.value is not None]

    provider = MeterProvider(metric_readers=[PrometheusMetricReader()])
    meter = provider.get_meter("corral.nodes")
    meter.create_observable_gauge(
        GAUGE_NAME,
        callbacks=[observe],
        description="transactions since the oldest snapshot held open in the control-plane database",
    )
    _registered = True


def same_database(url_a: str, url_b: str) -> bool:
    """Whether two PostgreSQL URLs name the same database on the same server (credentials ignored)."""
    if not url_a or not url_b:
        return False
    a, b = urlparse(url_a), urlparse(url_b)
    return ((a.hostname or "localhost"), a.port or 5432, a.path.strip("/")) == (
        (b.hostname or "localhost"),
        b.port or 5432,
        b.path.strip("/"),
    )
