"""Running SHA-256 of partial uploads, kept by the receiver between the requests of one upload.

A resumable upload arrives in several ranges: a cut connection, or a frontend that sends all but the
last byte while it is still hashing its own copy, then the last byte with the hash. The receiver
hashes every range from its receive buffers; keeping the digest of what it wrote so far lets the
next range continue it, so the verify at the end never reads the prefix back from disk.

A digest is trusted only for the file as it was when the digest was kept (size, mtime, inode, as
the ``.sha256`` sidecars are): anything else that touched the file makes the next range hash the
prefix from disk again. Only the receiver puts digests here, computed from the bytes it wrote
(DESIGN invariant 9). Memory is bounded: the oldest entries go first.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from pathlib import Path

MAX_ENTRIES = 64


def _identity(stat: os.stat_result) -> tuple[int, int, int]:
    return (stat.st_size, stat.st_mtime_ns, stat.st_ino)


class PartialDigests:
    """``path -> (file identity, running digest)`` for the partial files this receiver wrote."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._entries: OrderedDict[Path, tuple[tuple[int, int, int], hashlib._Hash]] = OrderedDict()

    def keep(self, path: Path, digest: hashlib._Hash, hashed_bytes: int) -> None:
        """Remember ``digest`` (of the first ``hashed_bytes`` of ``path``) if the file holds exactly those."""
        try:
            identity = _identity(os.stat(path))
        except OSError:
            return
        if identity[0] != hashed_bytes:
            self.forget(path)  # the file holds bytes this digest did not see
            return
        with self._lock:
            self._entries[path] = (identity, digest.copy())
            self._entries.move_to_end(path)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def current(self, path: Path) -> hashlib._Hash | None:
        """A copy of the kept digest of ``path`` if the file is still exactly as it was kept, else None."""
        with self._lock:
            entry = self._entries.get(path)
        if entry is None:
            return None
        try:
            identity = _identity(os.stat(path))
        except OSError:
            identity = None
        if identity != entry[0]:
            self.forget(path)
            return None
        return entry[1].copy()

    def forget(self, path: Path) -> None:
        with self._lock:
            self._entries.pop(path, None)
