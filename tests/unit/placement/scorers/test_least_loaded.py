"""The least-loaded scorer: fewest requests in flight first, then fewest loaded models."""

from __future__ import annotations

import pytest

from corral.placement.request import PlacementRequest
from corral.placement.scorers.least_loaded import LeastLoadedScorer
from corral.placement.snapshot import NodeSnapshot, ReplicaSnapshot


def node(*replicas: tuple[str, int]) -> NodeSnapshot:
    rows = tuple(
        ReplicaSnapshot(model=f"m{i}", replica_index=0, state=state, in_flight=n)
        for i, (state, n) in enumerate(replicas)
    )
    return NodeSnapshot(id="n", name="n", address="", http_address="", replicas=rows)


def score(n: NodeSnapshot) -> float:
    return LeastLoadedScorer().score(PlacementRequest("m"), n)


def test_an_empty_node_scores_full() -> None:
    assert score(node()) == 100.0


def test_requests_in_flight_weigh_more_than_loaded_models() -> None:
    busy = node(("loaded", 1))
    many_idle_models = node(*[("loaded", 0)] * 9)
    assert score(many_idle_models) > score(busy)
    assert score(busy) == pytest.approx(100.0 / 2.1)


def test_only_loaded_replicas_count() -> None:
    assert score(node(("loading", 50), ("unloading", 7))) == 100.0


def test_the_score_falls_with_load_but_stays_positive() -> None:
    scores = [score(node(("loaded", n))) for n in (0, 1, 10, 10_000)]
    assert scores == sorted(scores, reverse=True) and scores[-1] > 0.0
