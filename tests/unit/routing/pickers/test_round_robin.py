"""`round_robin`: each replica of the model in turn, regardless of load."""

from __future__ import annotations

from corral.routing.pickers.round_robin import RoundRobin
from corral.routing.replica import Replica
from support.replicas import POLICY, loads, replicas


def test_round_robin_takes_each_replica_in_turn_regardless_of_load() -> None:
    rs, rr = replicas(3), RoundRobin()
    picked = [rr.pick(rs, loads({rs[0].key: 9}), POLICY, None).replica for _ in range(4)]
    assert picked == [rs[0], rs[1], rs[2], rs[0]]


def test_the_turn_follows_the_replica_keys_not_the_order_they_are_given_in() -> None:
    rs, rr = replicas(3), RoundRobin()
    assert [rr.pick(list(reversed(rs)), loads({}), POLICY, None).replica for _ in range(3)] == rs


def test_each_model_keeps_its_own_turn() -> None:
    rr = RoundRobin()
    ms = [Replica(model="other", node_id=f"x{i}", node_name="x", address="b") for i in range(2)]
    rs = replicas(2)
    assert rr.pick(rs, loads({}), POLICY, None).replica is rs[0]
    assert rr.pick(ms, loads({}), POLICY, None).replica is ms[0]
    assert rr.pick(rs, loads({}), POLICY, None).replica is rs[1]


def test_the_turn_wraps_when_replicas_leave() -> None:
    rs, rr = replicas(3), RoundRobin()
    for _ in range(2):
        rr.pick(rs, loads({}), POLICY, None)
    decision = rr.pick(rs[:2], loads({}), POLICY, None)  # turn 2 of 2 replicas
    assert decision.replica is rs[0] and decision.reason == "turn 1 of 2"


def test_the_decision_carries_every_replicas_load() -> None:
    rs = replicas(2)
    decision = RoundRobin().pick(rs, loads({rs[1].key: 4}), POLICY, None)
    assert decision.picker == "round_robin" and decision.loads == {rs[0].key: 0, rs[1].key: 4}
