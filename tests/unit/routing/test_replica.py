"""The frontend's in-memory view of routable replicas: picks, identity, and the prefix index kept in step."""

from __future__ import annotations

from corral.routing.pickers.policies import RoutePolicies
from corral.routing.replica import Replica, ReplicaView, replica_key
from support.replicas import replicas


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


def test_a_replica_is_known_by_node_model_and_index() -> None:
    r = Replica(model="llama", node_id="n1", node_name="gpu-1", address="a", replica_index=3)
    assert r.key == replica_key("n1", "llama", 3) == "n1/llama#3"
    assert r != Replica(
        model="llama", node_id="n1", node_name="gpu-1", address="a", replica_index=3
    )  # identity


def test_a_model_without_replicas_picks_none() -> None:
    view = ReplicaView()
    assert view.pick("m") is None and view.count("m") == 0 and view.all() == []


def test_one_replica_without_a_prompt_is_picked_without_asking_for_loads() -> None:
    def no_load(r: Replica) -> int:
        raise AssertionError("the single-replica case reads no cluster-wide count")

    view = ReplicaView(cluster_in_flight=no_load)
    only = view.add(replicas(1)[0])
    assert view.pick("m") is only and "m" not in view.decisions


def test_several_replicas_are_picked_with_the_cluster_wide_count() -> None:
    rs = replicas(2)
    view = ReplicaView(cluster_in_flight=lambda r: 5 if r is rs[0] else 0)
    for r in rs:
        view.add(r)
    assert view.pick("m") is rs[1]
    assert view.decisions["m"].picker == "least_loaded" and view.decisions["m"].at_s > 0


def test_adding_a_known_replica_keeps_the_known_object_and_its_counters() -> None:
    view = ReplicaView()
    known = view.add(replicas(1)[0])
    known.in_flight = 4
    again = view.add(Replica(model="m", node_id="n0", node_name="node0", address="moved", replica_index=0))
    assert again is known and known.address == "moved" and known.in_flight == 4 and view.count("m") == 1


def test_removing_a_node_removes_its_replicas_of_every_model() -> None:
    view = ReplicaView()
    for r in [*replicas(3), Replica(model="x", node_id="n0", node_name="node0", address="b")]:
        view.add(r)
    view.remove_node("n0")
    assert [r.key for r in view.all()] == ["n1/m#0"]
    assert view.remove_key("m", "n0/m#0") is None  # already gone


def test_a_full_reread_keeps_counters_of_survivors_and_drops_the_rest() -> None:
    view = ReplicaView(policies=RoutePolicies(prefix_cache_default=True))
    old = [view.add(r) for r in replicas(3)]
    old[0].in_flight, old[0].last_used_s = 2, 9.0
    old[1].in_flight = 7
    index = view.policies.index
    for r in old:
        index.observe([1], r.key)
    fresh = replicas(3)
    fresh[1].address = "elsewhere"  # came back at another address: a new process
    view.replace_all(fresh[:2])
    survivors = {r.key: r for r in view.all()}
    assert survivors[old[0].key] is old[0] and old[0].in_flight == 2 and old[0].last_used_s == 9.0
    assert survivors[old[1].key] is fresh[1] and fresh[1].in_flight == 0
    assert old[2].key not in survivors
    assert index.match([1], [r.key for r in old]) == (1, [old[0].key])


def test_touch_marks_the_replica_used_now() -> None:
    view = ReplicaView()
    r = view.add(replicas(1)[0])
    view.touch(r)
    assert r.last_used_s > 0
