"""The reconciler's decision for one rule: keep the minimum, burst when all busy, shrink idle replicas."""

from __future__ import annotations

from dataclasses import replace

import pytest

from corral.placement.replica_plan import Plan, plan_replicas, registry_fingerprint, replica_floor
from corral.placement.rules import SchedulingRule
from corral.placement.snapshot import NodeSnapshot, ReplicaSnapshot

IDLE_WINDOW_S = 300.0


def node(
    name: str, *replicas: ReplicaSnapshot, labels: dict[str, str] | None = None, slots: int = 1
) -> NodeSnapshot:
    return NodeSnapshot(
        id=name,
        name=name,
        address="",
        http_address="",
        labels=labels or {},
        replicas=replicas,
        max_replicas_per_model=slots,
    )


def rep(index: int = 0, state: str = "loaded", model: str = "m") -> ReplicaSnapshot:
    return ReplicaSnapshot(model=model, replica_index=index, state=state)


def rule(**fields: object) -> SchedulingRule:
    return replace(SchedulingRule(id="r", model_name="m"), **fields)  # type: ignore[arg-type]


def plan(
    r: SchedulingRule,
    nodes: list[NodeSnapshot],
    *,
    busy: set[str] = frozenset(),  # type: ignore[assignment]
    idle_s: float = 0.0,
    selector: dict[str, str] | None = None,
) -> Plan:
    return plan_replicas(
        r,
        "m",
        selector if selector is not None else r.node_selector,
        nodes,
        in_flight=lambda n, x: 1.0 if f"{n.id}#{x.replica_index}" in busy else 0.0,
        idle_s=lambda n, x: idle_s,
        idle_window_s=IDLE_WINDOW_S,
    )


def test_missing_replicas_below_the_minimum_are_loaded_as_far_as_slots_allow() -> None:
    nodes = [node("a", rep()), node("b"), node("c")]
    assert plan(rule(min_replicas=2), nodes).load == 1
    assert plan(rule(min_replicas=5), nodes).load == 2  # only two free slots left


def test_a_replica_being_loaded_counts_toward_the_minimum() -> None:
    nodes = [node("a", rep()), node("b", rep(state="staging")), node("c")]
    p = plan(rule(min_replicas=2), nodes)
    assert (p.current, p.pending, p.load, p.stop) == (1, 1, 0, ())


@pytest.mark.parametrize(
    "nodes, selector, reason",
    [
        ([], {}, "m needs 2 more replica(s) but no healthy worker node is registered"),
        ([node("a")], {"tier": "gpu"}, 'node_selector {"tier": "gpu"} matches none of the 1 healthy node(s)'),
        (
            [node("a", rep(0)), node("b", rep(0, "staging"))],
            {},
            "m needs 1 more replica(s) but every matching node (2) already runs its maximum replicas of it",
        ),
    ],
)
def test_a_minimum_with_nowhere_to_go_is_unsatisfiable_and_says_why(
    nodes: list[NodeSnapshot], selector: dict[str, str], reason: str
) -> None:
    p = plan(rule(min_replicas=2 if not nodes or selector else 3, node_selector=selector), nodes)
    assert p.load == 0 and reason in p.unsatisfiable


def test_when_every_replica_is_busy_one_more_is_added_up_to_max() -> None:
    nodes = [node("a", rep()), node("b", rep()), node("c")]
    busy = {"a#0", "b#0"}
    assert plan(rule(min_replicas=1, max_replicas=3), nodes, busy=busy).load == 1
    assert plan(rule(min_replicas=1, max_replicas=2), nodes, busy=busy).load == 0  # at max
    assert plan(rule(min_replicas=1, max_replicas=0), nodes, busy=busy).load == 1  # 0 = no upper bound
    assert plan(rule(min_replicas=1, max_replicas=3), nodes, busy={"a#0"}).load == 0  # one is free


def test_idle_replicas_above_the_minimum_are_stopped_highest_index_first() -> None:
    nodes = [node("a", rep(0), rep(1), rep(2), slots=3)]
    p = plan(rule(min_replicas=1, max_replicas=3), nodes, idle_s=IDLE_WINDOW_S)
    assert [(s.replica.replica_index, s.why) for s in p.stop] == [(2, "idle"), (1, "idle")]
    assert plan(rule(min_replicas=1, max_replicas=3), nodes, idle_s=IDLE_WINDOW_S - 1).stop == ()  # not yet


def test_scale_down_never_goes_below_min_nor_stops_a_busy_replica() -> None:
    nodes = [node("a", rep(0), rep(1), rep(2), slots=3)]
    p = plan(rule(min_replicas=2, max_replicas=3), nodes, busy={"a#2"}, idle_s=IDLE_WINDOW_S)
    assert [s.replica.replica_index for s in p.stop] == [1]
    p = plan(rule(max_replicas=3), nodes, idle_s=IDLE_WINDOW_S)  # min 0 still keeps one loaded
    assert len(p.stop) == 2


def test_replicas_above_a_lowered_max_are_stopped_without_waiting_for_the_idle_window() -> None:
    nodes = [node("a", rep(0), rep(1), rep(2), slots=3)]
    p = plan(rule(min_replicas=1, max_replicas=2), nodes)
    assert [(s.replica.replica_index, s.why) for s in p.stop] == [(2, "above max_replicas")]


def test_static_spread_wants_one_replica_per_matching_node() -> None:
    gpu = {"tier": "gpu"}
    nodes = [node("a", rep(), labels=gpu), node("b", labels=gpu), node("c", labels={"tier": "cpu"})]
    r = rule(spread_all=True, node_selector=gpu)
    p = plan(r, nodes)
    assert (p.low, p.high, p.load) == (2, 2, 1)
    assert replica_floor(r, nodes) == 2


def test_a_spread_replica_on_a_node_that_no_longer_matches_is_stopped_once_the_rest_are_in_place() -> None:
    gpu = {"tier": "gpu"}
    nodes = [node("a", rep(), labels=gpu), node("b", rep(), labels={})]  # b lost its label
    p = plan(rule(spread_all=True, node_selector=gpu), nodes)
    assert [(s.node.name, s.why) for s in p.stop] == [("b", "misplaced")]


def test_a_spread_over_no_matching_node_wants_nothing() -> None:
    p = plan(rule(spread_all=True, node_selector={"tier": "gpu"}), [node("a")])
    assert (p.low, p.load, p.unsatisfiable) == (0, 0, "")


def test_the_registry_fingerprint_follows_labels_budgets_and_membership_not_heartbeats() -> None:
    a = NodeSnapshot(id="a", name="a", address="", http_address="", available_vram=5, labels={"x": "1"})
    base = registry_fingerprint([a])
    assert registry_fingerprint([replace(a, available_vram=7)]) == base
    assert registry_fingerprint([replace(a, labels={"x": "2"})]) != base
    assert registry_fingerprint([replace(a, vram_budget_bytes=1)]) != base
    assert registry_fingerprint([replace(a, max_replicas_per_model=2)]) != base
    assert registry_fingerprint([a, replace(a, id="b")]) != base


def test_a_rule_cools_down_only_while_the_registry_is_unchanged() -> None:
    r = rule(unsatisfiable_until_s=100.0, unsatisfiable_fingerprint="f1")
    assert r.cooling_down(50.0, "f1")
    assert not r.cooling_down(50.0, "f2")  # a node joined / was relabelled: retry now
    assert not r.cooling_down(150.0, "f1")  # the cooldown ended
