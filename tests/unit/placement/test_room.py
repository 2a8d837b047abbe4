"""Making room by eviction: only on nodes the model may use, exactly as many stops as the fit needs."""

from __future__ import annotations

import pytest

from corral.placement.pipeline import decide
from corral.placement.request import PlacementRequest
from corral.placement.room import ReplicaTest, RoomPlan, loaded_counts, plan_room, room_shortfall
from corral.placement.snapshot import NodeSnapshot, ReplicaSnapshot

MIB = 1 << 20


def replica(model: str, used_s: float, vram_mib: int = 4) -> ReplicaSnapshot:
    return ReplicaSnapshot(
        model=model, replica_index=0, state="loaded", last_used_s=used_s, vram_bytes=vram_mib * MIB
    )


def node(
    name: str, *replicas: ReplicaSnapshot, free_mib: int = 2, labels: dict[str, str] | None = None
) -> NodeSnapshot:
    return NodeSnapshot(
        id=name,
        name=name,
        address="",
        http_address="",
        total_vram=16 * MIB,
        available_vram=free_mib * MIB,
        labels=labels or {},
        replicas=replicas,
    )


def _idle(_node: NodeSnapshot, _replica: ReplicaSnapshot) -> bool:
    return True


def _recency(_node: NodeSnapshot, r: ReplicaSnapshot) -> float:
    return r.last_used_s


def _plan(
    need_mib: int,
    nodes: list[NodeSnapshot],
    floors: dict[str, int] | None = None,
    usable: ReplicaTest = _idle,
    selector: dict[str, str] | None = None,
) -> RoomPlan | None:
    req = PlacementRequest(model="big", vram_bytes=need_mib * MIB, selector=selector or {})
    allowed = decide(req, nodes).ranked
    return plan_room(req, allowed, loaded_counts(nodes), floors or {}, usable, _recency)


def test_a_replica_on_a_node_the_model_may_not_use_is_never_chosen_even_when_least_recently_used() -> None:
    nodes = [
        node("gpu-a", replica("a1", used_s=5.0), labels={"pool": "a"}),
        node("gpu-b", replica("b1", used_s=1.0), labels={"pool": "b"}),
    ]
    plan = _plan(5, nodes, selector={"pool": "a"})
    assert plan is not None and plan.node.name == "gpu-a" and [v.model for v in plan.victims] == ["a1"]


@pytest.mark.parametrize("need_mib, stops", [(6, 1), (9, 2), (14, 3)])  # 2 MiB free + 4 MiB per stop
def test_as_many_least_recently_used_replicas_stop_as_the_fit_needs(need_mib: int, stops: int) -> None:
    nodes = [node("gpu", replica("old", 1.0), replica("mid", 2.0), replica("new", 3.0))]
    plan = _plan(need_mib, nodes)
    assert plan is not None
    assert [v.model for v in plan.victims] == ["old", "mid", "new"][:stops]
    assert plan.freed_bytes == stops * 4 * MIB


def test_no_plan_when_even_every_evictable_replica_would_not_make_it_fit() -> None:
    nodes = [node("gpu", replica("old", 1.0), replica("new", 3.0))]
    assert _plan(11, nodes) is None  # 2 + 4 + 4 = 10 MiB at most


def test_the_node_needing_the_fewest_stops_wins() -> None:
    nodes = [
        node("gpu-a", replica("a1", 1.0), replica("a2", 2.0)),
        node("gpu-b", replica("b1", 5.0, vram_mib=8)),
    ]
    plan = _plan(9, nodes)
    assert plan is not None and plan.node.name == "gpu-b" and [v.model for v in plan.victims] == ["b1"]


def test_busy_replicas_and_rule_minimums_are_skipped() -> None:
    nodes = [node("gpu", replica("pinned", 1.0), replica("busy", 2.0), replica("free", 3.0))]
    plan = _plan(6, nodes, floors={"pinned": 1}, usable=lambda _n, r: r.model != "busy")
    assert plan is not None and [v.model for v in plan.victims] == ["free"]


def test_replicas_of_unknown_size_prove_nothing_and_are_not_chosen() -> None:
    nodes = [node("gpu", replica("sized", 2.0), replica("unknown", 1.0, vram_mib=0))]
    plan = _plan(6, nodes)
    assert plan is not None and [v.model for v in plan.victims] == ["sized"]


def test_the_shortfall_names_each_allowed_node_and_counts_the_others() -> None:
    nodes = [
        node("gpu-a", replica("a1", 1.0), labels={"pool": "a"}),
        node("gpu-b", replica("b1", 1.0), labels={"pool": "b"}),
    ]
    req = PlacementRequest(model="big", vram_bytes=12 * MIB, selector={"pool": "a"})
    decision = decide(req, nodes)
    rejected = {name: r.reason for name, r in decision.rejections.items()}
    assert room_shortfall(req, decision.ranked, loaded_counts(nodes), {}, rejected) == (
        "scheduling big: no node it may use can be freed enough by eviction: it needs 12.6 MB of VRAM, but "
        "gpu-a has 2.1 MB free and 4.2 MB in 1 evictable replica(s) (total 6.3 MB); "
        "not allowed: 1 selector mismatch"
    )
