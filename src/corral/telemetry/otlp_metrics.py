"""The Prometheus registry exported over OTLP: one source of figures for both `/metrics` and OTLP.

corral records its figures once, in prometheus-client families (cheap on the warm path, and what
`/metrics` serves). When OTLP is configured, this bridge reads the same registry every export
interval (OTEL_METRIC_EXPORT_INTERVAL, ms) and sends it as OTLP metrics — counters as cumulative
monotonic sums, gauges as gauges, histograms with their buckets — through the SDK's OTLP exporter.
Nothing is recorded twice and nothing runs per request.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from prometheus_client import REGISTRY
from prometheus_client.metrics_core import Metric as PromMetric
from prometheus_client.registry import CollectorRegistry

from corral.runtime.loops import run_periodic

INTERVAL_ENV = "OTEL_METRIC_EXPORT_INTERVAL"
DEFAULT_INTERVAL_S = 60.0
SCOPE = InstrumentationScope("corral")
CUMULATIVE = AggregationTemporality.CUMULATIVE


def export_interval_s() -> float:
    try:
        return max(0.1, float(os.environ.get(INTERVAL_ENV, "")) / 1000)
    except ValueError:
        return DEFAULT_INTERVAL_S


def _counter(family: PromMetric, start_ns: int, now_ns: int) -> Sum:
    points = [
        NumberDataPoint(dict(s.labels), start_ns, now_ns, s.value)
        for s in family.samples
        if s.name.endswith("_total") or s.name == family.name
    ]
    return Sum(points, CUMULATIVE, is_monotonic=True)


def _gauge(family: PromMetric, now_ns: int) -> Gauge:
    return Gauge([NumberDataPoint(dict(s.labels), now_ns, now_ns, s.value) for s in family.samples])


@dataclass
class _Series:
    labels: dict[str, str]
    buckets: list[tuple[float, float]] = field(default_factory=list)  # (le, cumulative count)
    total: float = 0.0
    count: int = 0

    def point(self, start_ns: int, now_ns: int) -> HistogramDataPoint:
        """Prometheus' cumulative `le` buckets as OTLP's per-bucket counts (the last one is +Inf)."""
        buckets = sorted(self.buckets)
        cumulative = [int(v) for _, v in buckets]
        counts = [c - p for c, p in zip(cumulative, [0, *cumulative[:-1]], strict=True)]
        return HistogramDataPoint(
            attributes=self.labels,
            start_time_unix_nano=start_ns,
            time_unix_nano=now_ns,
            count=self.count,
            sum=self.total,
            bucket_counts=counts,
            explicit_bounds=[le for le, _ in buckets if le != float("inf")],
            min=None,  # type: ignore[arg-type]  # unknown: left unset in OTLP
            max=None,  # type: ignore[arg-type]
        )


def _histogram(family: PromMetric, start_ns: int, now_ns: int) -> Histogram:
    series: dict[tuple[tuple[str, str], ...], _Series] = {}
    for s in family.samples:
        labels = {k: v for k, v in s.labels.items() if k != "le"}
        one = series.setdefault(tuple(sorted(labels.items())), _Series(labels))
        if s.name.endswith("_bucket"):
            one.buckets.append((float(s.labels["le"]), s.value))
        elif s.name.endswith("_sum"):
            one.total = s.value
        elif s.name.endswith("_count"):
            one.count = int(s.value)
    return Histogram([one.point(start_ns, now_ns) for one in series.values()], CUMULATIVE)


def registry_metrics(
    families: Iterable[PromMetric], resource: Resource, start_ns: int, now_ns: int | None = None
) -> MetricsData:
    """The families of a Prometheus registry as OTLP metrics data (summaries and info are left out)."""
    now_ns = now_ns or time.time_ns()
    metrics = []
    for family in families:
        data: Sum | Gauge | Histogram
        if family.type == "counter":
            data = _counter(family, start_ns, now_ns)
        elif family.type in ("gauge", "unknown"):
            data = _gauge(family, now_ns)
        elif family.type == "histogram":
            data = _histogram(family, start_ns, now_ns)
        else:
            continue
        if data.data_points:
            metrics.append(
                Metric(name=family.name, description=family.documentation, unit=family.unit, data=data)
            )
    return MetricsData([ResourceMetrics(resource, [ScopeMetrics(SCOPE, metrics, "")], "")])


class MetricsBridge:
    """Every interval: `before()` on the loop (figures read at scrape time), then collect and export in a thread."""

    def __init__(
        self, exporter: MetricExporter, resource: Resource, registry: CollectorRegistry = REGISTRY
    ) -> None:
        self.exporter, self.resource, self.registry = exporter, resource, registry
        self.start_ns = time.time_ns()

    def export_now(self) -> bool:
        """Collect and send once (blocking: call it in a thread); True when the collector accepted it."""
        data = registry_metrics(self.registry.collect(), self.resource, self.start_ns)
        return self.exporter.export(data).name == "SUCCESS"

    async def export_once(self, before: Callable[[], Awaitable[None]] | None = None) -> None:
        if before is not None:
            await before()
        await asyncio.to_thread(self.export_now)

    async def run(
        self,
        stop: asyncio.Event,
        interval_s: float | None = None,
        *,
        before: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        await run_periodic(
            "OTLP metrics export",
            lambda: self.export_once(before),
            interval_s or export_interval_s(),
            stop,
            delay_first=True,
        )

    def shutdown(self) -> None:
        self.exporter.shutdown()
