"""A node runs at most max_replicas_per_model replicas of a model; an unloading row keeps its index."""

from __future__ import annotations

from corral.placement.filters.replica_slots import NO_FREE_SLOT, ReplicaSlotFilter
from corral.placement.request import PlacementRequest
from corral.placement.snapshot import NodeSnapshot, ReplicaSnapshot


def node(slots: int, *replicas: tuple[str, int, str]) -> NodeSnapshot:
    rows = tuple(ReplicaSnapshot(model=m, replica_index=i, state=s) for m, i, s in replicas)
    return NodeSnapshot(
        id="n", name="gpu-1", address="", http_address="", max_replicas_per_model=slots, replicas=rows
    )


def test_an_empty_node_has_a_slot() -> None:
    assert ReplicaSlotFilter().check(PlacementRequest("m"), node(1)) is None


def test_a_full_node_is_rejected_naming_its_limit() -> None:
    rejection = ReplicaSlotFilter().check(
        PlacementRequest("m"), node(2, ("m", 0, "loaded"), ("m", 1, "loading"))
    )
    assert rejection is not None
    assert (rejection.filter, rejection.reason) == ("replica_slots", NO_FREE_SLOT)
    assert rejection.detail == "gpu-1 already runs 2 replica(s) of m"


def test_replicas_of_other_models_take_no_slot() -> None:
    assert ReplicaSlotFilter().check(PlacementRequest("m"), node(1, ("other", 0, "loaded"))) is None


def test_an_unloading_replica_frees_its_slot() -> None:
    assert ReplicaSlotFilter().check(PlacementRequest("m"), node(1, ("m", 0, "unloading"))) is None


def test_a_zero_or_negative_limit_still_allows_one_replica() -> None:
    assert ReplicaSlotFilter().check(PlacementRequest("m"), node(0)) is None
    assert ReplicaSlotFilter().check(PlacementRequest("m"), node(-3, ("m", 0, "loaded"))) is not None
