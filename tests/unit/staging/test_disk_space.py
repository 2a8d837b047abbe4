"""staging/disk_space: what a worker's disk admits above the space it keeps free, reservations that add up and shrink as bytes land."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.staging.disk_space import DiskBudget, NotEnoughDisk


def _budget(free_bytes: int, keep_free: int = 100) -> DiskBudget:
    return DiskBudget(min_free_bytes=keep_free, free_bytes=lambda _path: free_bytes)


class _Disk:
    """A filesystem of ``capacity`` bytes whose free space shrinks as writes land."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.used = capacity, 0

    def free(self, _path: Path) -> int:
        return self.capacity - self.used


@pytest.mark.parametrize("need, fits", [(900, True), (901, False)])  # 1000 free, 100 kept free
def test_disk_budget_admits_only_what_fits_above_the_kept_free_space(
    tmp_path: Path, need: int, fits: bool
) -> None:
    budget = _budget(1000)
    if fits:
        with budget.reserve(tmp_path, need, "key 'k'"):
            pass
    else:
        with (
            pytest.raises(NotEnoughDisk, match="it needs 901 bytes"),
            budget.reserve(tmp_path, need, "key 'k'"),
        ):
            pass


def test_concurrent_reservations_add_up_and_are_released(tmp_path: Path) -> None:
    budget = _budget(1000)
    with budget.reserve(tmp_path, 500, "key 'a'"):
        with pytest.raises(NotEnoughDisk, match=r"\(500 reserved by uploads in progress"):
            with budget.reserve(tmp_path, 500, "key 'b'"):
                pass
        with budget.reserve(tmp_path, 400, "key 'c'"):
            pass
    with budget.reserve(tmp_path, 900, "key 'd'"):
        pass


def test_a_reservation_of_unknown_size_grows_with_each_write_until_the_disk_cannot_hold_more(
    tmp_path: Path,
) -> None:
    disk = _Disk(100 << 20)
    budget = DiskBudget(min_free_bytes=10 << 20, free_bytes=disk.free)
    with budget.reserve(tmp_path, 0, "key 'c'") as reservation:
        for _ in range(90):  # 90 MiB fit above the 10 MiB kept free
            reservation.admit(1 << 20)
            disk.used += 1 << 20
            reservation.wrote(1 << 20)
        with pytest.raises(
            NotEnoughDisk, match=r"it needs 94371841 bytes .* has 10485760 bytes free \(0 reserved"
        ):
            reservation.admit(1)
    assert budget._reserved_bytes == {}


def test_written_bytes_leave_the_reservation_so_free_space_is_not_counted_twice(tmp_path: Path) -> None:
    disk = _Disk(1000)
    budget = DiskBudget(min_free_bytes=0, free_bytes=disk.free)
    with budget.reserve(tmp_path, 600, "key 'a'") as first:
        first.admit(600)
        disk.used += 600
        first.wrote(600)
        with budget.reserve(tmp_path, 400, "key 'b'"):  # 400 free, nothing outstanding: fits
            pass
