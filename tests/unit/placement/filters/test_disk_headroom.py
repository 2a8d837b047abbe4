"""Disk headroom: the model plus max(5%, 1 GiB) must fit in the models filesystem's free space."""

from __future__ import annotations

from corral.config.sizes import GIB
from corral.placement.filters.disk_headroom import (
    NOT_ENOUGH_DISK,
    UNKNOWN_SIZE_FLOOR_BYTES,
    DiskHeadroomFilter,
    disk_message,
    required_disk_bytes,
)
from corral.placement.rejection import Rejection
from corral.placement.request import PlacementRequest
from corral.placement.snapshot import NodeSnapshot


def node(total: int, free: int, name: str = "gpu-1") -> NodeSnapshot:
    return NodeSnapshot(
        id=name, name=name, address="", http_address="", total_disk=total, available_disk=free
    )


def test_small_models_need_a_whole_gib_of_margin() -> None:
    assert required_disk_bytes(GIB) == 2 * GIB
    assert required_disk_bytes(1) == 1 + GIB


def test_large_models_need_five_percent_of_margin() -> None:
    assert required_disk_bytes(100 * GIB) == 105 * GIB


def test_an_unknown_or_nonsensical_size_needs_the_floor() -> None:
    assert required_disk_bytes(0) == UNKNOWN_SIZE_FLOOR_BYTES
    assert required_disk_bytes(-10 * GIB) == UNKNOWN_SIZE_FLOOR_BYTES


def test_a_node_with_exactly_enough_free_disk_passes() -> None:
    req = PlacementRequest("m", disk_bytes=10 * GIB)
    assert DiskHeadroomFilter().check(req, node(100 * GIB, 11 * GIB)) is None


def test_a_node_one_byte_short_is_rejected_with_its_figures() -> None:
    req = PlacementRequest("m", disk_bytes=10 * GIB)
    rejection = DiskHeadroomFilter().check(req, node(100 * GIB, 11 * GIB - 1))
    assert rejection is not None
    assert (rejection.filter, rejection.reason) == ("disk_headroom", NOT_ENOUGH_DISK)
    assert rejection.detail == "gpu-1 has 11.8 GB free of 107.4 GB"
    assert rejection.fields == {"need": 11 * GIB, "free": 11 * GIB - 1, "total": 100 * GIB}


def test_shared_models_or_an_unknown_disk_stay_in_rotation() -> None:
    full = node(100 * GIB, 0)
    assert DiskHeadroomFilter().check(PlacementRequest("m", disk_bytes=GIB, shared_models=True), full) is None
    assert DiskHeadroomFilter().check(PlacementRequest("m", disk_bytes=GIB), node(0, 0)) is None


def test_the_capacity_message_lists_every_rejected_node() -> None:
    rejections = [
        Rejection("disk_headroom", NOT_ENOUGH_DISK, "a has 1 GB free"),
        Rejection("d", "r", "b has 2 GB"),
    ]
    assert disk_message("llama", 73_500_000_000, rejections) == (
        "scheduling llama: no node has enough free disk for the model: need 73.5 GB free on the models "
        "filesystem, but a has 1 GB free, b has 2 GB"
    )
