"""Disk admission for incoming files: refuse an upload the filesystem cannot hold, before any byte lands.

Without it a worker with a nearly full disk accepts a 40 GB upload, writes for minutes and then fails
with ENOSPC half-way. Each accepted upload reserves the bytes it still has to write until it ends, so
two concurrent uploads that each fit alone but not together are not both accepted.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

DEFAULT_MIN_FREE_BYTES = 64 << 20
"""Kept free on the models filesystem after an upload (sidecars, temp files, other writers)."""

FreeBytesProbe = Callable[[Path], int]


def statvfs_free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on the filesystem holding ``path``."""
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


class NotEnoughDisk(Exception):
    """The filesystem cannot hold the upload; the message names the sizes, the directory and the fix."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class DiskBudget:
    """Admits writes against free space minus what accepted uploads still have to write.

    A reservation counts only the bytes still to come: as an upload writes, the filesystem's free
    space shrinks and its reservation shrinks with it, so nothing is counted twice. An upload of
    unknown size (chunked) starts with nothing reserved and grows its reservation before each write
    (:meth:`DiskReservation.admit`), so it is refused with the same message when it gets there.
    """

    def __init__(
        self, min_free_bytes: int = DEFAULT_MIN_FREE_BYTES, free_bytes: FreeBytesProbe = statvfs_free_bytes
    ) -> None:
        self.min_free_bytes = max(0, min_free_bytes)
        self._free_bytes = free_bytes
        self._lock = threading.Lock()
        self._reserved_bytes: dict[int, int] = {}

    @contextlib.contextmanager
    def reserve(self, directory: Path, size_bytes: int, what: str) -> Iterator[DiskReservation]:
        """Hold ``size_bytes`` on ``directory``'s filesystem for the block, or raise :class:`NotEnoughDisk`.

        The writer reports each write through the yielded reservation's :meth:`DiskReservation.admit`.
        """
        reservation = DiskReservation(self, directory, os.stat(directory).st_dev, what)
        try:
            reservation.grow(max(0, size_bytes))
            yield reservation
        finally:
            reservation.release()

    def _grow(self, reservation: DiskReservation, size_bytes: int) -> None:
        with self._lock:
            free = self._free_bytes(reservation.directory)
            reserved = self._reserved_bytes.get(reservation.device, 0)
            if free - reserved - self.min_free_bytes < size_bytes:
                raise NotEnoughDisk(
                    _refusal(
                        reservation.what,
                        reservation.directory,
                        reservation.written_bytes + reservation.outstanding_bytes + size_bytes,
                        free,
                        reserved,
                        self.min_free_bytes,
                    )
                )
            self._reserved_bytes[reservation.device] = reserved + size_bytes

    def _shrink(self, device: int, size_bytes: int) -> None:
        with self._lock:
            left = self._reserved_bytes.get(device, 0) - size_bytes
            if left > 0:
                self._reserved_bytes[device] = left
            else:
                self._reserved_bytes.pop(device, None)


class DiskReservation:
    """One upload's claim on a filesystem: the bytes it may still write without asking again."""

    GROW_STEP_BYTES = 16 << 20  # a chunked upload asks for room this much at a time

    def __init__(self, budget: DiskBudget, directory: Path, device: int, what: str) -> None:
        self.budget, self.directory, self.device, self.what = budget, directory, device, what
        self.outstanding_bytes = 0
        self.written_bytes = 0

    def grow(self, size_bytes: int) -> None:
        if size_bytes <= 0:
            return
        self.budget._grow(self, size_bytes)
        self.outstanding_bytes += size_bytes

    def admit(self, count_bytes: int) -> None:
        """About to write ``count_bytes``: make sure the reservation covers them, growing it if it is
        short (raises :class:`NotEnoughDisk` when the filesystem cannot hold them)."""
        short = count_bytes - self.outstanding_bytes
        if short > 0:
            try:
                self.grow(max(short, self.GROW_STEP_BYTES))
            except NotEnoughDisk:
                self.grow(short)  # a full step does not fit; exactly what this write needs might

    def wrote(self, count_bytes: int) -> None:
        """``count_bytes`` were written: the free space shows them now, so they leave the reservation."""
        taken = min(count_bytes, self.outstanding_bytes)
        self.outstanding_bytes -= taken
        self.written_bytes += count_bytes
        self.budget._shrink(self.device, taken)

    def release(self) -> None:
        if self.outstanding_bytes > 0:
            self.budget._shrink(self.device, self.outstanding_bytes)
            self.outstanding_bytes = 0


def _refusal(what: str, directory: Path, need: int, free: int, reserved: int, keep_free: int) -> str:
    return (
        f"not enough disk space for {what}: it needs {need} bytes but the filesystem of {str(directory)!r} "
        f"has {free} bytes free ({reserved} reserved by uploads in progress, {keep_free} kept free by "
        f"CORRAL_STAGING_MIN_FREE_BYTES); free space on the worker, move LOCALAI_MODELS_PATH to a larger "
        f"volume, or schedule the model on another node"
    )


def enospc_message(what: str, directory: Path) -> str:
    """The 507 text for a write that hit ENOSPC anyway (size unknown up front, or another writer)."""
    return (
        f"the disk filled up while writing {what} under {str(directory)!r} (no space left on device); "
        f"free space on the worker or move LOCALAI_MODELS_PATH to a larger volume"
    )
