"""`power_of_two`: the less loaded of two replicas drawn at random."""

from __future__ import annotations

import random

from corral.routing.pickers.power_of_two import PowerOfTwo
from support.replicas import POLICY, loads, replicas


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


def test_a_single_replica_is_drawn_against_itself() -> None:
    rs = replicas(1)
    decision = PowerOfTwo(random.Random(1)).pick(rs, loads({}), POLICY, None)
    assert decision.replica is rs[0]
    assert decision.reason == f"less loaded of two random replicas ({rs[0].key}, {rs[0].key})"


def test_the_two_drawn_are_distinct_and_only_their_loads_are_read() -> None:
    rs = replicas(5)
    for seed in range(20):
        decision = PowerOfTwo(random.Random(seed)).pick(rs, loads({}), POLICY, None)
        assert len(decision.loads) == 2 and decision.replica.key in decision.loads


def test_equal_loads_go_to_either_of_the_two_at_random() -> None:
    rs = replicas(2)
    rs[0].last_used_s, rs[1].last_used_s = 9.0, 2.0  # recency no longer decides: frontends would agree on it
    p2 = PowerOfTwo(random.Random(3))
    assert {p2.pick(rs, loads({}), POLICY, None).replica.key for _ in range(30)} == {rs[0].key, rs[1].key}
