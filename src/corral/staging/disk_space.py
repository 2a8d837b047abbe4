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
    """Admits writes of a declared size against free space minus in-flight reservations."""

    def __init__(self, min_free_bytes: int = DEFAULT_MIN_FREE_BYTES,
                 free_bytes: FreeBytesProbe = statvfs_free_bytes) -> None:
        self.min_free_bytes = max(0, min_free_bytes)
        self._free_bytes = free_bytes
        self._lock = threading.Lock()
        self._reserved_bytes: dict[int, int] = {}

    @contextlib.contextmanager
    def reserve(self, directory: Path, size_bytes: int, what: str) -> Iterator[None]:
        """Hold ``size_bytes`` on ``directory``'s filesystem for the block, or raise :class:`NotEnoughDisk`."""
        if size_bytes <= 0:
            yield
            return
        device = os.stat(directory).st_dev
        with self._lock:
            free = self._free_bytes(directory)
            reserved = self._reserved_bytes.get(device, 0)
            if free - reserved - self.min_free_bytes < size_bytes:
                raise NotEnoughDisk(_refusal(what, directory, size_bytes, free, reserved, self.min_free_bytes))
            self._reserved_bytes[device] = reserved + size_bytes
        try:
            yield
        finally:
            with self._lock:
                left = self._reserved_bytes.get(device, 0) - size_bytes
                if left > 0:
                    self._reserved_bytes[device] = left
                else:
                    self._reserved_bytes.pop(device, None)


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
