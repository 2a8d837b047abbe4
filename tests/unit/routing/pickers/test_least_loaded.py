"""`least_loaded`: fewest requests in flight, then least recently used."""

from __future__ import annotations

from corral.routing.pickers.least_loaded import LeastLoaded
from corral.routing.replica import Replica
from support.replicas import POLICY, loads, replicas


def test_least_loaded_then_least_recently_used() -> None:
    rs = replicas(3)
    rs[1].last_used_s, rs[2].last_used_s, rs[0].last_used_s = 5.0, 3.0, 1.0
    assert LeastLoaded().pick(rs, loads({rs[0].key: 1}), POLICY, None).replica is rs[2]


def test_load_beats_recency() -> None:
    rs = replicas(2)
    rs[0].last_used_s, rs[1].last_used_s = 100.0, 1.0
    decision = LeastLoaded().pick(rs, loads({rs[1].key: 1}), POLICY, None)
    assert decision.replica is rs[0]
    assert decision.loads == {rs[0].key: 0, rs[1].key: 1} and decision.picker == "least_loaded"


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
