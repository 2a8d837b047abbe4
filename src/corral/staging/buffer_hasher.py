"""SHA-256 of an upload computed from the receiver's own buffers, by a thread beside it.

The receiver takes a free buffer, receives into it, writes it to the file and hands it over; this
thread hashes it and returns it to the pool. Nothing is read back from the page cache (the
:class:`~corral.staging.following_hasher.FollowingHasher` did that: one more copy of every byte, and
a reader contending with the writer for the same pages). The hash itself (~1 CPU-second per GiB
with SHA extensions) is what a verified transfer costs beyond ``curl -T``; this keeps it the only
extra work (``benchmarks/staging_throughput.py`` prints the CPU seconds of both sides).

A few buffers let the receiver run ahead of the hash by that much; when the hash falls behind, the
receiver waits for a buffer (TCP backpressure), never for the disk. Used for uploads that start at
byte 0, and for a range that continues a prefix whose running digest the receiver kept
(:mod:`corral.staging.partial_digests`); a resumed upload whose prefix it did not hash keeps the
following hasher.
"""

from __future__ import annotations

import hashlib
import queue
import threading

BUFFER_BYTES = 1 << 20
BUFFER_COUNT = 4


class BufferHasher:
    """Hashes, in order, the buffers the receiver gives back; :meth:`finish` returns the hex digest."""

    def __init__(
        self,
        *,
        buffer_bytes: int = BUFFER_BYTES,
        buffer_count: int = BUFFER_COUNT,
        prefix: hashlib._Hash | None = None,
        prefix_bytes: int = 0,
    ) -> None:
        """``prefix``: the running digest of the first ``prefix_bytes`` of the file, continued here."""
        self._buffers = [memoryview(bytearray(buffer_bytes)) for _ in range(buffer_count)]
        self._free: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._full: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()
        for index in range(buffer_count):
            self._free.put(index)
        self._digest = prefix.copy() if prefix is not None else hashlib.sha256()
        self.hashed_bytes = prefix_bytes
        self._closed = False
        self._abandoned = False
        self._thread = threading.Thread(target=self._run, name="buffer-hash", daemon=True)
        self._thread.start()

    def take(self) -> tuple[int, memoryview]:
        """A free buffer to receive into (waits while all are being hashed)."""
        index = self._free.get()
        return index, self._buffers[index]

    def give(self, index: int, count_bytes: int) -> None:
        """The first ``count_bytes`` of buffer ``index`` are part of the upload, in order: hash them."""
        if count_bytes > 0:
            self._full.put((index, count_bytes))
        else:
            self._free.put(index)

    def settle(self) -> hashlib._Hash:
        """Wait for the hash of every given buffer; the running digest of the ``hashed_bytes`` so far."""
        if not self._closed:
            self._closed = True
            self._full.put(None)
            self._thread.join()
        return self._digest.copy()

    def finish(self, size_bytes: int) -> str:
        """Wait for the hash of every given buffer; it must cover exactly ``size_bytes`` bytes."""
        self.settle()
        if self.hashed_bytes != size_bytes:
            raise OSError(f"hashed {self.hashed_bytes} bytes of an upload of {size_bytes} bytes")
        return self._digest.hexdigest()

    def abandon(self) -> None:
        """Stop without a result (the upload failed)."""
        self._abandoned = True
        self.settle()

    def _run(self) -> None:
        while (item := self._full.get()) is not None:
            index, count = item
            if not self._abandoned:
                self._digest.update(self._buffers[index][:count])
                self.hashed_bytes += count
            self._free.put(index)
