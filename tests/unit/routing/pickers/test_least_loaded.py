"""`least_loaded`: fewest requests in flight; among near-equal loads a random replica (anti-herding)."""

from __future__ import annotations

import random

from corral.routing.pickers.least_loaded import LeastLoaded
from corral.routing.replica import Replica
from support.replicas import POLICY, loads, replicas


def test_among_equal_loads_a_random_replica_serves_and_a_busier_one_never() -> None:
    rs = replicas(3)
    picker = LeastLoaded(random.Random(5))
    chosen = {picker.pick(rs, loads({rs[0].key: 1}), POLICY, None).replica.key for _ in range(40)}
    assert chosen == {rs[1].key, rs[2].key}  # 0 and 1 in flight are not near-equal: rs[0] is never chosen


def test_loads_within_ten_percent_of_the_least_are_near_equal() -> None:
    rs = replicas(3)
    busy = loads({rs[0].key: 20, rs[1].key: 22, rs[2].key: 23})  # 20 + 10% = 22
    picker = LeastLoaded(random.Random(11))
    assert {picker.pick(rs, busy, POLICY, None).replica.key for _ in range(40)} == {rs[0].key, rs[1].key}


def test_load_beats_recency() -> None:
    rs = replicas(2)
    rs[0].last_used_s, rs[1].last_used_s = 100.0, 1.0
    decision = LeastLoaded(random.Random(0)).pick(rs, loads({rs[1].key: 1}), POLICY, None)
    assert decision.replica is rs[0]
    assert decision.loads == {rs[0].key: 0, rs[1].key: 1} and decision.picker == "least_loaded"


def test_frontends_that_see_the_same_idle_replicas_spread_their_picks() -> None:
    """Eight frontends (one picker and seed each) with the same view each pick at the same moment: herding would
    send all eight to one replica."""
    rs = replicas(4)
    picks = [
        LeastLoaded(random.Random(seed)).pick(rs, loads({}), POLICY, None).replica.key for seed in range(8)
    ]
    assert len(set(picks)) >= 3, picks


def test_two_pickers_with_different_seeds_spread_equal_loads_over_every_replica() -> None:
    rs = replicas(2)
    a, b = LeastLoaded(random.Random(1)), LeastLoaded(random.Random(2))
    first = [
        (a.pick(rs, loads({}), POLICY, None).replica, b.pick(rs, loads({}), POLICY, None).replica)
        for _ in range(20)
    ]
    assert any(x is not y for x, y in first)  # at some moment the two frontends chose different replicas
    assert {x.key for x, _ in first} == {y.key for _, y in first} == {r.key for r in rs}


def test_one_replica_is_always_chosen() -> None:
    rs = replicas(1)
    assert LeastLoaded().pick(rs, loads({rs[0].key: 10_000}), POLICY, None).replica is rs[0]


def test_the_load_function_is_asked_once_per_replica() -> None:
    rs, asked = replicas(3), []

    def load(r: Replica) -> int:
        asked.append(r.key)
        return 0

    LeastLoaded().pick(rs, load, POLICY, None)
    assert sorted(asked) == sorted(r.key for r in rs)
