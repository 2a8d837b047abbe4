"""`round_robin`: each replica of the model in turn, regardless of load."""

from __future__ import annotations

from corral.routing.pickers.base import Load, Policy
from corral.routing.pickers.round_robin import RoundRobin
from corral.routing.replica import Replica


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


def test_round_robin_takes_each_replica_in_turn_regardless_of_load() -> None:
    rs, rr = replicas(3), RoundRobin()
    picked = [rr.pick(rs, loads({rs[0].key: 9}), POLICY, None).replica for _ in range(4)]
    assert picked == [rs[0], rs[1], rs[2], rs[0]]
