"""The idle scorer prefers nodes with no loaded model."""

from __future__ import annotations

from corral.placement.request import PlacementRequest
from corral.placement.scorers.idle import IdleScorer
from corral.placement.snapshot import NodeSnapshot, ReplicaSnapshot


def node(*states: str) -> NodeSnapshot:
    rows = tuple(ReplicaSnapshot(model=f"m{i}", replica_index=0, state=s) for i, s in enumerate(states))
    return NodeSnapshot(id="n", name="n", address="", http_address="", replicas=rows)


def test_a_node_without_loaded_models_scores_full() -> None:
    assert IdleScorer().score(PlacementRequest("m"), node()) == 100.0


def test_replicas_still_loading_or_unloading_do_not_make_a_node_busy() -> None:
    assert IdleScorer().score(PlacementRequest("m"), node("loading", "unloading")) == 100.0


def test_one_loaded_model_scores_zero() -> None:
    assert IdleScorer().score(PlacementRequest("m"), node("loaded")) == 0.0
    assert IdleScorer().score(PlacementRequest("m"), node("loaded", "loaded")) == 0.0
