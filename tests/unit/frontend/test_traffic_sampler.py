"""The traffic sampler without NATS or PostgreSQL: at each interval's end it takes what this frontend counted since
the last sample, adds the requests in flight on its replicas, and merges the sample into its own ring; a second
wake within the same interval takes nothing (the next one takes it all)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from corral.frontend.traffic_sampler import TrafficSampler, node_figures
from corral.routing.replica import Replica
from corral.store.node_resources import NodeResources
from corral.telemetry.families import LATENCY_BUCKETS_S, LOAD_BUCKETS_S
from corral.telemetry.traffic_counters import TrafficFamilies

INTERVAL_S = 5.0


def _families() -> TrafficFamilies:
    registry = CollectorRegistry()
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


async def test_each_interval_holds_what_was_counted_since_the_last_sample() -> None:
    fams, now = _families(), [1_000_002.0]  # 2 s into bucket 200000
    fams.requests.labels("m", "200").inc(7)  # before the sampler started: no interval of ours
    replica = Replica("m", "node-1", "dgx-01", "127.0.0.1:1", in_flight=3)
    sampler = TrafficSampler(None, None, "fe", INTERVAL_S, lambda: [replica], fams, clock=lambda: now[0])
    fams.requests.labels("m", "200").inc(10)
    fams.queued.labels("m").set(2)
    now[0] = 1_000_005.2  # bucket 200000 ended
    await sampler.sample_once()
    fams.requests.labels("m", "200").inc(5)
    now[0] = 1_000_006.0
    await sampler.sample_once()  # same interval again: nothing taken
    now[0] = 1_000_010.3
    await sampler.sample_once()
    model = sampler.ring.series(now[0], 2 * INTERVAL_S)["models"]["m"]
    assert model["t"] == [1_000_005.0, 1_000_010.0]
    assert model["requests_per_s"] == [2.0, 1.0]
    assert model["in_flight"] == [3, 3]
    assert model["queued"] == [2, 2]


def test_node_figures_are_memory_used_and_disk_free_from_the_registry_rows() -> None:
    row = NodeResources(
        "id-1", "dgx-01", "healthy", 80 << 30, 60 << 30, 512 << 30, 500 << 30, 2 << 40, 1 << 40
    )
    assert node_figures([row])["id-1"].vram_used_bytes == 20 << 30
    assert node_figures([row])["id-1"].ram_used_bytes == 12 << 30
    assert node_figures([row])["id-1"].disk_free_bytes == 1 << 40
