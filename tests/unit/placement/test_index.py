"""The indexed placement decides exactly what the linear pipeline decides, on random clusters."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TypeVar

import pytest

from corral.placement.errors import PlacementError
from corral.placement.index import PlacementIndex, decide_indexed
from corral.placement.pipeline import Decision, decide
from corral.placement.request import PlacementRequest
from corral.placement.snapshot import NodeSnapshot, ReplicaSnapshot

GIB = 1 << 30
MODELS = ("llama", "qwen", "gemma")


def _node(rng: random.Random, i: int) -> NodeSnapshot:
    replicas = tuple(
        ReplicaSnapshot(
            model=rng.choice(MODELS),
            replica_index=j,
            state=rng.choice(["loaded", "loaded", "unloading"]),
            in_flight=rng.randrange(3),
        )
        for j in range(rng.randrange(3))
    )
    labels = {
        k: v
        for k, v in (("zone", rng.choice("ab")), ("gpu", rng.choice(["a100", "h100"])))
        if rng.random() < 0.8
    }
    total_vram = rng.choice([0, 24 * GIB, 80 * GIB])
    return NodeSnapshot(
        id=f"id{i}",
        name=f"node-{rng.randrange(10_000):05d}-{i}",
        address="",
        http_address="",
        total_vram=total_vram,
        available_vram=rng.randrange(total_vram + 1) if total_vram else 0,
        reserved_vram=rng.choice([0, 0, 4 * GIB]),
        vram_budget_bytes=rng.choice([0, 0, 16 * GIB]),
        total_disk=rng.choice([0, 500 * GIB]),
        available_disk=rng.randrange(100) * GIB,
        max_replicas_per_model=rng.choice([1, 2]),
        labels=labels,
        replicas=replicas,
    )


def _request(rng: random.Random) -> PlacementRequest:
    selector = rng.choice([{}, {"zone": "a"}, {"!gpu": ""}, {"!zone": "b", "gpu": "h100"}, {"zone": "c"}])
    return PlacementRequest(
        rng.choice(MODELS),
        disk_bytes=rng.choice([0, 5 * GIB, 60 * GIB]),
        vram_bytes=rng.choice([0, 2 * GIB, 12 * GIB, 30 * GIB]),
        selector=selector,
        disk_check=rng.random() < 0.8,
        shared_models=rng.random() < 0.1,
    )


Nodes = TypeVar("Nodes")  # a node list, or the index built from it


def _outcome(
    decide_fn: Callable[[PlacementRequest, Nodes], Decision], req: PlacementRequest, nodes: Nodes
) -> tuple[object, ...]:
    try:
        decision: Decision = decide_fn(req, nodes)
    except PlacementError as exc:
        return ("refused", str(exc))
    best = decision.ranked[0]
    return (
        [n.name for n in decision.ranked],
        decision.needs_eviction,
        decision.scores[best.name],
        decision.warnings,
    )


@pytest.mark.parametrize("seed", range(40))
def test_indexed_decisions_equal_the_linear_pipeline_on_random_clusters(seed: int) -> None:
    rng = random.Random(seed)
    nodes = [_node(rng, i) for i in range(rng.randrange(0, 60))]
    index = PlacementIndex(nodes)
    for _ in range(10):
        req = _request(rng)
        assert _outcome(decide_indexed, req, index) == _outcome(
            decide, req, sorted(nodes, key=lambda n: n.name)
        )


def test_an_index_kept_current_node_by_node_decides_like_one_built_fresh() -> None:
    rng = random.Random(99)
    nodes = {f"id{i}": _node(rng, i) for i in range(50)}
    index = PlacementIndex(nodes.values())
    for step in range(200):
        i = rng.randrange(60)
        if rng.random() < 0.2:
            nodes.pop(f"id{i}", None)
            index.remove(f"id{i}")
        else:
            nodes[f"id{i}"] = _node(rng, i)
            index.upsert(nodes[f"id{i}"])
        req = _request(rng)
        assert _outcome(decide_indexed, req, index) == _outcome(decide, req, list(nodes.values())), step


def test_replace_all_drops_vanished_nodes_and_reindexes_changed_ones() -> None:
    rng = random.Random(5)
    first = [_node(rng, i) for i in range(30)]
    second = [_node(rng, i) for i in range(10, 40)]
    index = PlacementIndex(first)
    index.replace_all(second)
    fresh = PlacementIndex(second)

    assert index.nodes == fresh.nodes
    for _ in range(20):
        req = _request(rng)
        assert _outcome(decide_indexed, req, index) == _outcome(decide_indexed, req, fresh)


def test_an_indexed_decision_looks_at_the_best_node_only_until_asked_for_more() -> None:
    nodes = [
        NodeSnapshot(
            id=f"n{i}",
            name=f"node-{i}",
            address="",
            http_address="",
            total_vram=80 * GIB,
            available_vram=i * GIB,
        )
        for i in range(1, 1001)
    ]
    req = PlacementRequest("m", vram_bytes=10 * GIB)
    decision = decide_indexed(req, PlacementIndex(nodes))

    assert decision.node.name == "node-1000"
    assert decision.ranked._seen == [decision.node]  # type: ignore[attr-defined]
    assert decision.ranked[:3] == decide(req, nodes).ranked[:3]
