"""The Prometheus registry as OTLP metrics: counters, gauges and histograms keep their figures."""

from __future__ import annotations

from opentelemetry.sdk.metrics.export import Gauge as OtlpGauge
from opentelemetry.sdk.metrics.export import Histogram as OtlpHistogram
from opentelemetry.sdk.metrics.export import Sum
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from corral.telemetry.otlp_metrics import registry_metrics


def test_counters_gauges_and_histograms_become_otlp_data() -> None:
    registry = CollectorRegistry()
    requests = Counter("demo_requests", "requests", ["model"], registry=registry)
    requests.labels("a").inc(3)
    Gauge("demo_nodes", "nodes", registry=registry).set(2)
    latency = Histogram("demo_seconds", "latency", buckets=(0.1, 1.0), registry=registry)
    for seconds in (0.05, 0.5, 0.7, 5.0):
        latency.observe(seconds)
    data = registry_metrics(registry.collect(), Resource.create({"service.name": "t"}), start_ns=1, now_ns=2)
    metrics = {m.name: m.data for m in data.resource_metrics[0].scope_metrics[0].metrics}

    counter = metrics["demo_requests"]
    assert isinstance(counter, Sum) and counter.is_monotonic
    assert [(dict(p.attributes or {}), p.value) for p in counter.data_points] == [({"model": "a"}, 3.0)]
    gauge = metrics["demo_nodes"]
    assert isinstance(gauge, OtlpGauge) and gauge.data_points[0].value == 2.0
    histogram = metrics["demo_seconds"]
    assert isinstance(histogram, OtlpHistogram)
    point = histogram.data_points[0]
    assert list(point.explicit_bounds) == [0.1, 1.0]
    assert list(point.bucket_counts) == [1, 2, 1]  # per bucket, not cumulative; the last one is +Inf
    assert (point.count, round(point.sum, 6)) == (4, 6.25)


def test_families_without_samples_are_left_out() -> None:
    registry = CollectorRegistry()
    Counter("demo_unused", "never labelled", ["model"], registry=registry)
    data = registry_metrics(registry.collect(), Resource.create({}), start_ns=1, now_ns=2)
    assert data.resource_metrics[0].scope_metrics[0].metrics == []
