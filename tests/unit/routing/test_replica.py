"""The frontend's in-memory view of routable replicas: picks, identity, and the prefix index kept in step."""

from __future__ import annotations

from corral.routing.pickers.policies import RoutePolicies
from corral.routing.replica import Replica, ReplicaView


def replicas(n: int) -> list[Replica]:
    return [
        Replica(
            model="m", node_id=f"n{i // 2}", node_name=f"node{i // 2}", address=f"a{i}", replica_index=i % 2
        )
        for i in range(n)
    ]


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
