"""A frontend's traffic figures per model, read from its own Prometheus families once per interval.

The warm path already counts every request in `corral_requests_total` and its latency in
`corral_request_duration_seconds` (through `labels.RequestFigures`' cached children); the traffic series
reuse those counts instead of recording anything more per request: once per interval the sampler reads
the families' totals (`read_totals`) and takes the difference with the previous read (`difference`).
A family whose total went down (a process restarted in the same registry, tests) counts from zero again.
Tokens come from `corral_usage_tokens_total`, which the usage ledger adds to at each flush
(CORRAL_USAGE_FLUSH_INTERVAL, 5 s by default): they land in the interval of the flush that wrote them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

from corral.telemetry import families
from corral.telemetry.traffic_sample import BUCKETS, COUNT_FIELDS, ModelSample, empty_buckets

ERROR_STATUSES = frozenset({"429"})  # besides 5xx: refused for load (queue full or timed out)
_BUCKET_INDEX = {bound: i for i, bound in enumerate(families.LATENCY_BUCKETS_S)} | {math.inf: BUCKETS - 1}


@dataclass(frozen=True)
class TrafficFamilies:
    """The families the series read (the process's own by default; tests pass their own)."""

    requests: Counter = families.REQUESTS  # model, status
    latency: Histogram = families.REQUEST_SECONDS  # model, status; LATENCY_BUCKETS_S
    ttft: Histogram = families.FIRST_TOKEN_SECONDS  # model; LATENCY_BUCKETS_S
    tokens: Counter = families.USAGE_TOKENS  # model, kind
    loads: Histogram = families.LOAD_SECONDS  # model, outcome
    decisions: Counter = families.ROUTING_DECISIONS  # model, decision
    queued: Gauge = families.QUEUE_DEPTH  # model


def _samples(family: MetricWrapperBase) -> Iterable[tuple[str, dict[str, str], float]]:
    for metric in family.collect():
        for sample in metric.samples:
            yield sample.name, sample.labels, sample.value


def _bucket_counts(family: MetricWrapperBase, into: dict[str, ModelSample], attr: str) -> None:
    """Add each child's per-bucket counts (Prometheus exposes them cumulative over `le`) to `into[model]`."""
    cumulative: dict[tuple[str, ...], list[int]] = {}
    for name, labels, value in _samples(family):
        if not name.endswith("_bucket"):
            continue
        index = _BUCKET_INDEX.get(float(labels["le"]))
        if index is None:
            continue
        key = tuple(v for k, v in sorted(labels.items()) if k != "le")
        cumulative.setdefault((labels["model"], *key), empty_buckets())[index] = round(value)
    for key, counts in cumulative.items():
        target = getattr(into.setdefault(key[0], ModelSample()), attr)
        previous = 0
        for i, running in enumerate(counts):
            target[i] += running - previous
            previous = running


def read_totals(fams: TrafficFamilies) -> dict[str, ModelSample]:
    """Every model's totals since the process started (counts and histogram buckets; gauges left at 0)."""
    totals: dict[str, ModelSample] = {}

    def of(model: str) -> ModelSample:
        return totals.setdefault(model, ModelSample())

    for name, labels, value in _samples(fams.requests):
        if name.endswith("_total"):
            sample, status = of(labels["model"]), labels["status"]
            sample.requests += round(value)
            if status.startswith("5") or status in ERROR_STATUSES:
                sample.errors += round(value)
    for name, labels, value in _samples(fams.tokens):
        if name.endswith("_total") and labels["kind"] in ("prompt", "completion"):
            kind = "tokens_in" if labels["kind"] == "prompt" else "tokens_out"
            setattr(of(labels["model"]), kind, getattr(of(labels["model"]), kind) + round(value))
    for name, labels, value in _samples(fams.loads):
        if name.endswith("_count"):
            of(labels["model"]).loads += round(value)
    for name, labels, value in _samples(fams.decisions):
        if name.endswith("_total") and labels["decision"] == "evict":
            of(labels["model"]).evictions += round(value)
    _bucket_counts(fams.latency, totals, "latency")
    _bucket_counts(fams.ttft, totals, "ttft")
    return totals


def read_queued(fams: TrafficFamilies) -> dict[str, int]:
    """Requests waiting in this frontend's router queue now, per model."""
    return {labels["model"]: round(value) for _, labels, value in _samples(fams.queued) if value > 0}


def difference(before: dict[str, ModelSample], now: dict[str, ModelSample]) -> dict[str, ModelSample]:
    """What happened between two reads of `read_totals`, per model (models with nothing to tell left out)."""
    out = {}
    for model, current in now.items():
        previous = before.get(model, ModelSample())
        delta = ModelSample.of(
            [_since(getattr(current, n), getattr(previous, n)) for n in COUNT_FIELDS],
            [_since(c, p) for c, p in zip(current.latency, previous.latency, strict=True)],
            [_since(c, p) for c, p in zip(current.ttft, previous.ttft, strict=True)],
        )
        if not delta.is_empty():
            out[model] = delta
    return out


def _since(current: int, previous: int) -> int:
    return current - previous if current >= previous else current  # a reset counts from zero
