"""Replicas and loads for the routing unit tests: `n` replicas of model `m`, two per node."""

from __future__ import annotations

from corral.routing.pickers.base import Load, Policy
from corral.routing.replica import Replica

POLICY = Policy("prefix_cache")


def replicas(n: int) -> list[Replica]:
    return [
        Replica(
            model="m", node_id=f"n{i // 2}", node_name=f"node{i // 2}", address=f"a{i}", replica_index=i % 2
        )
        for i in range(n)
    ]


def loads(values: dict[str, int]) -> Load:
    """In flight per replica key; a replica not named has none."""
    return lambda r: values.get(r.key, 0)
