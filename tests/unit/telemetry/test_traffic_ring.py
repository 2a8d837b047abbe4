"""The traffic ring: every frontend's sample of an interval is merged once, the ring keeps an hour whatever the
traffic, and `series()` answers the Dashboard's shape with arrays aligned with `t` and nulls where nobody sampled."""

from __future__ import annotations

import json

import pytest

from corral.telemetry.traffic_ring import MODEL_SERIES, NODE_SERIES, NodeFigures, TrafficRing
from corral.telemetry.traffic_sample import FrontendSample, ModelSample, empty_buckets

INTERVAL_S = 5.0
NOW_S = 1_000_000.0  # bucket 200000 is running; 199999 is the last to have ended
LAST = 199_999


def _sample(frontend: str, bucket: int, **models: ModelSample) -> FrontendSample:
    return FrontendSample(frontend, bucket, INTERVAL_S, dict(models))


def _latency(index: int, n: int) -> list[int]:
    counts = empty_buckets()
    counts[index] = n
    return counts


def test_samples_of_two_frontends_for_one_interval_add_up() -> None:
    ring = TrafficRing(INTERVAL_S)
    assert ring.add_sample(_sample("a", LAST, m=ModelSample(requests=10, in_flight=2)), NOW_S)
    assert ring.add_sample(_sample("b", LAST, m=ModelSample(requests=5, errors=5, in_flight=1)), NOW_S)
    series = ring.series(NOW_S, window_s=INTERVAL_S)
    model = series["models"]["m"]
    assert model["requests_per_s"] == [3.0]  # 15 requests over 5 s
    assert model["errors_per_s"] == [1.0]
    assert model["in_flight"] == [3]
    assert model["t"] == [(LAST + 1) * INTERVAL_S]


def test_a_repeated_sample_of_a_frontend_is_merged_once() -> None:
    ring = TrafficRing(INTERVAL_S)
    sample = _sample("a", LAST, m=ModelSample(requests=10))
    assert ring.add_sample(sample, NOW_S)
    assert not ring.add_sample(sample, NOW_S)
    assert ring.series(NOW_S, INTERVAL_S)["cluster"]["requests_per_s"] == [2.0]


def test_cluster_sums_models_and_merges_their_latency_histograms() -> None:
    ring = TrafficRing(INTERVAL_S)
    ring.add_sample(_sample("a", LAST, x=ModelSample(requests=1, latency=_latency(3, 1))), NOW_S)
    ring.add_sample(_sample("b", LAST, y=ModelSample(requests=1, latency=_latency(5, 1))), NOW_S)
    cluster = ring.series(NOW_S, INTERVAL_S)["cluster"]
    assert cluster["requests_per_s"] == [0.4]
    assert cluster["latency_p50_ms"] == [10.0]  # the top of bucket 3, (5, 10] ms
    assert cluster["ttft_p50_ms"] == [None]  # no stream: no time to first token


def test_intervals_nobody_sampled_are_null_and_a_model_absent_from_a_sampled_one_is_zero() -> None:
    ring = TrafficRing(INTERVAL_S)
    ring.add_sample(_sample("a", LAST - 2, m=ModelSample(requests=5)), NOW_S)
    ring.add_sample(_sample("a", LAST), NOW_S)  # sampled: nothing happened
    series = ring.series(NOW_S, 3 * INTERVAL_S)
    assert series["cluster"]["requests_per_s"] == [1.0, None, 0.0]
    model = series["models"]["m"]
    assert model["requests_per_s"] == [1.0, None, 0.0]
    assert model["latency_p95_ms"] == [None, None, None]
    assert all(len(model[name]) == 3 for name in MODEL_SERIES)


def test_the_newest_sampled_interval_ends_the_series_even_before_this_frontend_sampled_the_last() -> None:
    ring = TrafficRing(INTERVAL_S)
    ring.add_sample(_sample("a", LAST - 1, m=ModelSample(requests=5)), NOW_S)
    series = ring.series(NOW_S, 2 * INTERVAL_S)
    assert series["cluster"]["t"] == [(LAST - 1) * INTERVAL_S, LAST * INTERVAL_S]
    assert series["cluster"]["requests_per_s"][-1] == 1.0


def test_the_ring_keeps_one_hour_and_forgets_older_intervals() -> None:
    ring = TrafficRing(INTERVAL_S)
    assert ring.capacity == 720
    ring.add_sample(_sample("a", LAST - 720, m=ModelSample(requests=5)), NOW_S - 3600)
    ring.add_sample(_sample("a", LAST, m=ModelSample(requests=10)), NOW_S)  # takes the same slot
    assert not ring.add_sample(_sample("b", LAST - 720, m=ModelSample(requests=5)), NOW_S)  # too old now
    series = ring.series(NOW_S)
    assert len(series["cluster"]["t"]) == 720
    assert series["cluster"]["requests_per_s"][-1] == 2.0
    assert series["cluster"]["requests_per_s"][0] is None


@pytest.mark.parametrize("ahead", [3, 10_000])  # intervals ahead of our clock
def test_a_sample_from_a_clock_far_ahead_is_dropped(ahead: int) -> None:
    ring = TrafficRing(INTERVAL_S)
    ring.add_sample(_sample("a", LAST, m=ModelSample(requests=10)), NOW_S)
    assert not ring.add_sample(_sample("b", LAST + 1 + ahead, m=ModelSample(requests=1)), NOW_S)
    assert ring.series(NOW_S, INTERVAL_S)["cluster"]["requests_per_s"] == [2.0]


def test_a_sample_of_another_interval_length_is_dropped() -> None:
    ring = TrafficRing(INTERVAL_S)
    assert not ring.add_sample(FrontendSample("a", LAST, 1.0, {"m": ModelSample(requests=1)}), NOW_S)


def test_model_and_node_filters_keep_only_what_was_asked() -> None:
    ring = TrafficRing(INTERVAL_S)
    ring.add_sample(_sample("a", LAST, x=ModelSample(requests=1), y=ModelSample(requests=2)), NOW_S)
    gpu = NodeFigures("dgx-01", 4 << 30, 8 << 30, 10 << 30, 64 << 30, 100 << 30)
    cpu = NodeFigures("cpu-01", 0, 0, 1 << 30, 16 << 30, 50 << 30)
    ring.add_nodes(LAST, {"id-1": gpu, "id-2": cpu}, NOW_S)
    series = ring.series(NOW_S, INTERVAL_S, model="y", node="dgx-01")
    assert list(series["models"]) == ["y"]
    assert series["nodes"] == {
        "id-1": {
            "name": "dgx-01",
            "t": [(LAST + 1) * INTERVAL_S],
            **{f: [getattr(gpu, f)] for f in NODE_SERIES},
        }
    }
    assert list(ring.series(NOW_S, INTERVAL_S, node="id-2")["nodes"]) == ["id-2"]
    assert ring.series(NOW_S, INTERVAL_S, model="never")["models"]["never"]["requests_per_s"] == [0.0]


def test_node_figures_are_null_for_intervals_without_a_read() -> None:
    ring = TrafficRing(INTERVAL_S)
    ring.add_nodes(LAST - 1, {"id-1": NodeFigures("n", 1, 2, 3, 4, 5)}, NOW_S)
    ring.add_sample(_sample("a", LAST), NOW_S)
    node = ring.series(NOW_S, 2 * INTERVAL_S)["nodes"]["id-1"]
    assert node["disk_free_bytes"] == [5, None]
    assert node["vram_total_bytes"] == [2, None]


def test_every_series_of_the_answer_has_the_dashboards_keys() -> None:
    ring = TrafficRing(INTERVAL_S)
    series = ring.series(NOW_S, 60)
    assert set(series) == {"interval_s", "now", "cluster", "models", "nodes"}
    assert set(series["cluster"]) == {"t", *MODEL_SERIES}
    assert len(series["cluster"]["t"]) == 12
    assert series["cluster"]["requests_per_s"] == [None] * 12


def test_a_new_ring_restored_from_a_peers_snapshot_answers_alike() -> None:
    peer = TrafficRing(INTERVAL_S)
    peer.add_sample(_sample("a", LAST - 1, m=ModelSample(requests=5, latency=_latency(4, 5))), NOW_S)
    peer.add_sample(_sample("b", LAST - 1, m=ModelSample(requests=5)), NOW_S)
    peer.add_nodes(LAST - 1, {"id-1": NodeFigures("n", 1, 2, 3, 4, 5)}, NOW_S)
    fresh = TrafficRing(INTERVAL_S)
    assert fresh.restore(json.loads(json.dumps(peer.snapshot(1 << 20))), NOW_S) == 1
    assert fresh.series(NOW_S, 60) == peer.series(NOW_S, 60)
    assert not fresh.add_sample(_sample("a", LAST - 1, m=ModelSample(requests=5)), NOW_S)  # already in it


def test_a_snapshot_keeps_the_newest_slots_that_fit_its_budget() -> None:
    peer = TrafficRing(INTERVAL_S)
    for bucket in range(LAST - 9, LAST + 1):
        peer.add_sample(_sample("a", bucket, m=ModelSample(requests=1)), NOW_S)
    one_slot = len(json.dumps(peer.snapshot(1 << 20)["slots"][0], separators=(",", ":"))) + 1
    slots = peer.snapshot(3 * one_slot)["slots"]
    assert [s["bucket"] for s in slots] == [LAST, LAST - 1, LAST - 2]


def test_restoring_leaves_a_slot_that_already_holds_one_of_the_same_frontends() -> None:
    peer = TrafficRing(INTERVAL_S)
    peer.add_sample(_sample("a", LAST, m=ModelSample(requests=5)), NOW_S)
    mine = TrafficRing(INTERVAL_S)
    mine.add_sample(
        _sample("a", LAST, m=ModelSample(requests=5)), NOW_S
    )  # heard live before the snapshot came
    assert mine.restore(peer.snapshot(1 << 20), NOW_S) == 0
    assert mine.series(NOW_S, INTERVAL_S)["cluster"]["requests_per_s"] == [1.0]  # not counted twice


@pytest.mark.parametrize(
    "snapshot",
    [
        [],
        {"interval_s": 1.0, "slots": []},  # another interval
        {"interval_s": INTERVAL_S, "slots": [{"bucket": 1, "frontends": [], "models": {}, "nodes": None}]},
        {
            "interval_s": INTERVAL_S,
            "slots": [{"bucket": 1, "frontends": ["a"], "models": {}, "nodes": {"n": [1]}}],
        },
        {
            "interval_s": INTERVAL_S,
            "slots": [{"bucket": 1, "frontends": ["a"], "models": {"m": [1]}, "nodes": None}],
        },
    ],
)
def test_a_malformed_snapshot_is_refused(snapshot: object) -> None:
    with pytest.raises(ValueError):
        TrafficRing(INTERVAL_S).restore(snapshot, NOW_S)
