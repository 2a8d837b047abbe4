"""The traffic figures read from a frontend's own Prometheus families: per model, what happened between two reads
(requests, 5xx and 429 as errors, the latency histogram's per-bucket counts, tokens, ended loads, evictions), and a
family that went back down counts from zero."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from corral.telemetry.families import LATENCY_BUCKETS_S, LOAD_BUCKETS_S
from corral.telemetry.traffic_counters import TrafficFamilies, difference, read_queued, read_totals
from corral.telemetry.traffic_sample import empty_buckets


def _families() -> TrafficFamilies:
    registry = (
        CollectorRegistry()
    )  # the same names and labels as corral's families, in a registry of the test's
    return TrafficFamilies(
        requests=Counter("corral_requests", "", ["model", "status"], registry=registry),
        latency=Histogram(
            "corral_request_duration_seconds",
            "",
            ["model", "status"],
            buckets=LATENCY_BUCKETS_S,
            registry=registry,
        ),
        ttft=Histogram(
            "corral_time_to_first_token_seconds", "", ["model"], buckets=LATENCY_BUCKETS_S, registry=registry
        ),
        tokens=Counter("corral_usage_tokens", "", ["model", "kind"], registry=registry),
        loads=Histogram(
            "corral_load_duration_seconds",
            "",
            ["model", "outcome"],
            buckets=LOAD_BUCKETS_S,
            registry=registry,
        ),
        decisions=Counter("corral_routing_decisions", "", ["model", "decision"], registry=registry),
        queued=Gauge("corral_queue_depth", "", ["model"], registry=registry),
    )


def _request(fams: TrafficFamilies, model: str, status: str, seconds: float) -> None:
    fams.requests.labels(model, status).inc()
    fams.latency.labels(model, status).observe(seconds)


def test_an_interval_holds_what_was_counted_since_the_last_read_per_model() -> None:
    fams = _families()
    _request(fams, "m", "200", 0.004)
    before = read_totals(fams)
    _request(fams, "m", "200", 0.004)  # (0.0025, 0.005]: bucket 2
    _request(fams, "m", "503", 0.2)  # (0.1, 0.25]: bucket 7
    _request(fams, "m", "429", 0.0001)  # bucket 0
    _request(fams, "m", "400", 0.0001)  # a client's mistake: not an error of the service
    fams.ttft.labels("m").observe(0.02)
    fams.tokens.labels("m", "prompt").inc(30)
    fams.tokens.labels("m", "completion").inc(12)
    fams.tokens.labels("m", "cached").inc(99)
    fams.loads.labels("m", "failed").observe(3)
    fams.decisions.labels("m", "evict").inc()
    fams.decisions.labels("m", "warm").inc(5)
    delta = difference(before, read_totals(fams))["m"]
    assert (delta.requests, delta.errors, delta.tokens_in, delta.tokens_out) == (4, 2, 30, 12)
    assert (delta.loads, delta.evictions) == (1, 1)
    latency = empty_buckets()
    latency[0], latency[2], latency[7] = 2, 1, 1
    assert delta.latency == latency
    assert sum(delta.ttft) == 1 and delta.ttft[4] == 1  # (0.01, 0.025]


def test_a_model_with_nothing_new_is_left_out() -> None:
    fams = _families()
    _request(fams, "busy", "200", 0.01)
    _request(fams, "idle", "200", 0.01)
    before = read_totals(fams)
    _request(fams, "busy", "200", 0.01)
    assert list(difference(before, read_totals(fams))) == ["busy"]


def test_a_total_that_went_down_counts_from_zero() -> None:
    fams = _families()
    for _ in range(5):
        _request(fams, "m", "200", 0.01)
    before = read_totals(fams)
    fresh = _families()  # a process that restarted: its totals start again
    _request(fresh, "m", "200", 0.01)
    _request(fresh, "m", "200", 0.01)
    delta = difference(before, read_totals(fresh))["m"]
    assert delta.requests == 2
    assert sum(delta.latency) == 2


def test_queued_requests_are_read_from_the_queue_depth_gauge() -> None:
    fams = _families()
    fams.queued.labels("m").set(3)
    fams.queued.labels("empty").set(0)
    assert read_queued(fams) == {"m": 3}
