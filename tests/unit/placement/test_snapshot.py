"""The cluster snapshot one placement decision reads: loaded models, load, free VRAM, replica slots."""

from __future__ import annotations

import dataclasses

import pytest

from corral.placement.snapshot import NodeSnapshot, ReplicaSnapshot


def node(
    *replicas: ReplicaSnapshot, slots: int = 1, available: int = 0, budget: int = 0, reserved: int = 0
) -> NodeSnapshot:
    return NodeSnapshot(
        id="n",
        name="n",
        address="",
        http_address="",
        available_vram=available,
        vram_budget_bytes=budget,
        reserved_vram=reserved,
        max_replicas_per_model=slots,
        replicas=replicas,
    )


def rep(model: str = "m", index: int = 0, state: str = "loaded", in_flight: int = 0) -> ReplicaSnapshot:
    return ReplicaSnapshot(model=model, replica_index=index, state=state, in_flight=in_flight)


def test_only_loaded_replicas_count_as_loaded_and_in_flight() -> None:
    n = node(
        rep("a", in_flight=2),
        rep("b", state="loading", in_flight=5),
        rep("c", state="unloading", in_flight=1),
    )
    assert n.loaded_models == 1
    assert n.in_flight == 2


def test_model_names_leave_out_what_is_unloading() -> None:
    n = node(rep("a"), rep("b", state="loading"), rep("c", state="unloading"), rep("a", index=1))
    assert n.model_names == frozenset({"a", "b"})


@pytest.mark.parametrize(
    ("available", "budget", "reserved", "free"),
    [
        (0, 0, 0, 0),  # unknown
        (10, 0, 0, 10),
        (10, 4, 0, 4),  # the budget caps what is detected
        (4, 10, 0, 4),
        (10, 0, 3, 7),
        (10, 4, 3, 1),
        (10, 0, 30, 0),  # never negative
    ],
)
def test_free_vram_is_min_of_detected_and_budget_less_reservations(
    available: int, budget: int, reserved: int, free: int
) -> None:
    assert node(available=available, budget=budget, reserved=reserved).free_vram == free


def test_the_lowest_free_index_is_used() -> None:
    assert node(slots=3).free_replica_index("m") == 0
    assert node(rep(index=0), rep(index=2), slots=3).free_replica_index("m") == 1
    assert node(rep(index=1), slots=3).free_replica_index("m") == 0
    assert node(rep("other", index=0), slots=1).free_replica_index("m") == 0


def test_a_full_node_has_no_free_index() -> None:
    assert node(rep(index=0), slots=1).free_replica_index("m") is None
    assert node(rep(index=0), rep(index=1, state="loading"), slots=2).free_replica_index("m") is None


def test_an_unloading_replica_frees_its_slot_but_keeps_its_index() -> None:
    n = node(rep(index=0, state="unloading"), slots=1)
    assert n.replica_indexes("m") == set()
    assert n.free_replica_index("m") == 1  # the process m#0 being stopped is never reused


def test_a_limit_below_one_means_one() -> None:
    assert node(slots=0).free_replica_index("m") == 0
    assert node(rep(), slots=0).free_replica_index("m") is None


def test_snapshots_are_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        node().name = "x"  # type: ignore[misc]
