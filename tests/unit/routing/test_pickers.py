"""Warm-path pickers and the prefix-cache load guard (the reference's semantics)."""

from __future__ import annotations

import random

import pytest

from corral.placement.rules import SchedulingRule
from corral.routing.pickers.base import Load, Policy
from corral.routing.pickers.least_loaded import LeastLoaded
from corral.routing.pickers.policies import RoutePolicies
from corral.routing.pickers.power_of_two import PowerOfTwo
from corral.routing.pickers.prefix_cache import PrefixCache, eligible
from corral.routing.pickers.round_robin import RoundRobin
from corral.routing.prefix_index import PrefixIndex
from corral.routing.replica import Replica, ReplicaView


def replicas(n: int) -> list[Replica]:
    return [
        Replica(
            model="m", node_id=f"n{i // 2}", node_name=f"node{i // 2}", address=f"a{i}", replica_index=i % 2
        )
        for i in range(n)
    ]


def loads(values: dict[str, int]) -> Load:
    return lambda r: values.get(r.key, 0)


POLICY = Policy("prefix_cache")


@pytest.mark.parametrize(
    ("in_flight", "minimum", "abs_", "rel", "ok"),
    [
        (2, 0, 2, 1.5, False),  # 2 ≤ 0+2 but 2 > 0×1.5+1
        (1, 0, 2, 1.5, True),
        (4, 2, 2, 1.5, True),  # 4 ≤ 2+2 and 4 ≤ 2×1.5+1
        (5, 2, 2, 1.5, False),  # abs breached
        (13, 8, 64, 1.5, True),  # 13 ≤ 8×1.5+1
        (14, 8, 64, 1.5, False),  # rel breached
    ],
)
def test_the_guard_admits_within_both_thresholds(
    in_flight: int, minimum: int, abs_: int, rel: float, ok: bool
) -> None:
    assert eligible(in_flight, minimum, Policy("prefix_cache", balance_abs=abs_, balance_rel=rel)) is ok


def test_prefix_cache_routes_to_the_replica_holding_the_longest_prefix() -> None:
    index, rs = PrefixIndex(), replicas(4)
    index.observe([1, 2, 3], rs[2].key)
    index.observe([1], rs[1].key)
    d = PrefixCache(index).pick(rs, loads({rs[2].key: 1}), POLICY, [1, 2, 3, 4])
    assert (d.replica, d.match_blocks, d.chain_blocks) == (rs[2], 3, 4)
    assert d.reason == "holds 3 of 4 prompt blocks (0.75)"


def test_a_match_below_min_prefix_match_goes_to_the_least_loaded() -> None:
    index, rs = PrefixIndex(), replicas(2)
    index.observe([1], rs[1].key)
    d = PrefixCache(index).pick(rs, loads({rs[0].key: 1}), POLICY, [1, 2, 3, 4])  # 0.25 < 0.3
    assert d.replica is rs[1]  # least loaded happens to be it; now load it
    d = PrefixCache(index).pick(rs, loads({rs[1].key: 1}), POLICY, [1, 2, 3, 4])
    assert d.replica is rs[0]
    assert d.reason == "best match 0.25 of the prompt is below min_prefix_match 0.3: least loaded"


def test_the_guard_sends_a_hot_replica_that_is_too_busy_to_the_least_loaded() -> None:
    index, rs = PrefixIndex(), replicas(2)
    index.observe([1, 2], rs[0].key)
    d = PrefixCache(index).pick(rs, loads({rs[0].key: 2}), POLICY, [1, 2])
    assert d.replica is rs[1]
    assert d.reason == (
        f"{rs[0].key} holds 1.00 of the prompt but has 2 in flight vs 0 (balance_abs_threshold 2, "
        "balance_rel_threshold 1.5): least loaded"
    )
    assert PrefixCache(index).pick(rs, loads({rs[0].key: 1}), POLICY, [1, 2]).replica is rs[0]


def test_among_replicas_with_the_same_match_the_least_loaded_wins() -> None:
    index, rs = PrefixIndex(), replicas(3)
    for r in rs:
        index.observe([1, 2], r.key)
    d = PrefixCache(index).pick(rs, loads({rs[0].key: 1, rs[2].key: 1}), POLICY, [1, 2, 3])
    assert d.replica is rs[1]


def test_round_robin_takes_each_replica_in_turn_regardless_of_load() -> None:
    rs, rr = replicas(3), RoundRobin()
    picked = [rr.pick(rs, loads({rs[0].key: 9}), POLICY, None).replica for _ in range(4)]
    assert picked == [rs[0], rs[1], rs[2], rs[0]]


def test_least_loaded_then_least_recently_used() -> None:
    rs = replicas(3)
    rs[1].last_used_s, rs[2].last_used_s, rs[0].last_used_s = 5.0, 3.0, 1.0
    assert LeastLoaded().pick(rs, loads({rs[0].key: 1}), POLICY, None).replica is rs[2]


def test_power_of_two_takes_the_less_loaded_of_two_random_replicas() -> None:
    rs = replicas(4)
    busy = {r.key: 5 for r in rs}
    busy[rs[3].key] = 0
    p2 = PowerOfTwo(random.Random(7))
    picks = [p2.pick(rs, loads(busy), POLICY, None) for _ in range(50)]
    for d in picks:  # whenever the idle replica is drawn it wins; the busiest never beats it
        if rs[3].key in d.loads:
            assert d.replica is rs[3]
    assert {d.replica.key for d in picks} >= {rs[3].key}


def test_a_rule_chooses_the_picker_and_overrides_thresholds_when_positive() -> None:
    policies = RoutePolicies(prefix_cache_default=True)
    assert policies.get("m").picker == "prefix_cache"
    policies.set_rule(
        SchedulingRule(
            id="1",
            model_name="alias",
            route_policy="",
            balance_abs_threshold=64,
            balance_rel_threshold=0.0,
            min_prefix_match=0.5,
        ),
        {"alias": "m"},
    )
    assert policies.get("m") == Policy("prefix_cache", 0.5, 64, 1.5, "rule")
    policies.set_rule(SchedulingRule(id="2", model_name="m", route_policy="round_robin"))
    assert policies.get("m").picker == "round_robin"
    policies.forget_rule("m")
    assert policies.get("m").picker == "prefix_cache"
    assert RoutePolicies(prefix_cache_default=False).get("m").picker == "least_loaded"


def test_the_view_drops_prefix_entries_of_replicas_that_leave_or_change_address() -> None:
    view = ReplicaView(policies=RoutePolicies(prefix_cache_default=True))
    rs = [view.add(r) for r in replicas(2)]
    index = view.policies.index
    index.observe([1, 2], rs[0].key)
    index.observe([1, 2], rs[1].key)
    view.remove_key("m", rs[0].key)
    assert index.match([1, 2], [rs[0].key, rs[1].key]) == (2, [rs[1].key])
    view.add(
        Replica(model="m", node_id=rs[1].node_id, node_name="node0", address="elsewhere", replica_index=1)
    )
    assert index.match([1, 2], [rs[1].key]) == (0, [])


def test_the_view_records_which_picker_chose_which_replica() -> None:
    view = ReplicaView(policies=RoutePolicies(prefix_cache_default=True))
    rs = [view.add(r) for r in replicas(2)]
    view.policies.index.observe([1, 2], rs[1].key)
    assert view.pick("m", [1, 2]) is rs[1]
    assert view.decisions["m"].explain()["picker"] == "prefix_cache"
    assert view.decisions["m"].explain()["replica"] == rs[1].key
