"""`least_loaded`: fewest requests in flight, then least recently used."""

from __future__ import annotations

from corral.routing.pickers.base import Load, Policy
from corral.routing.pickers.least_loaded import LeastLoaded
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


def test_least_loaded_then_least_recently_used() -> None:
    rs = replicas(3)
    rs[1].last_used_s, rs[2].last_used_s, rs[0].last_used_s = 5.0, 3.0, 1.0
    assert LeastLoaded().pick(rs, loads({rs[0].key: 1}), POLICY, None).replica is rs[2]
