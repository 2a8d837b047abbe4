"""SHA-256 of a file that is still being written, computed by a thread that follows the writer.

The receiving thread only does ``recv`` and ``write`` (the same work as a raw receiver); this thread
reads what has landed -- from the page cache -- and hashes it, starting at byte 0. For a resumed
upload it hashes the bytes already on disk while the rest of the body is still arriving, so the
verify at the end of the upload costs only the tail instead of a full re-read.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

HASH_READ_BYTES = 4 << 20


class FollowingHasher:
    """Hashes ``path`` from byte 0 up to the size the writer reports with :meth:`advance`."""

    def __init__(self, path: Path, *, name: str = "follow-hash") -> None:
        self.path = path
        self._cond = threading.Condition()
        self._visible_bytes = 0
        self._closed = False
        self._abandoned = False
        self._digest = hashlib.sha256()
        self._hashed_bytes = 0
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def advance(self, size_bytes: int) -> None:
        """The first ``size_bytes`` bytes of the file are written and may be hashed."""
        with self._cond:
            if size_bytes > self._visible_bytes:
                self._visible_bytes = size_bytes
                self._cond.notify()

    def finish(self, size_bytes: int) -> str:
        """Hash up to ``size_bytes`` and return the hex digest of exactly that prefix."""
        with self._cond:
            self._visible_bytes = max(self._visible_bytes, size_bytes)
            self._closed = True
            self._cond.notify()
        self._thread.join()
        if self._error is not None:
            raise self._error
        if self._hashed_bytes != size_bytes:
            raise OSError(f"{self.path} holds {self._hashed_bytes} bytes, expected {size_bytes} (it shrank)")
        return self._digest.hexdigest()

    def abandon(self) -> None:
        """Stop without a result (the upload failed)."""
        with self._cond:
            self._abandoned = True
            self._cond.notify()
        self._thread.join()

    def _run(self) -> None:
        try:
            with open(self.path, "rb", buffering=0) as file:
                self._follow(file)
        except BaseException as exc:  # reported by finish()
            self._error = exc

    def _follow(self, file) -> None:  # type: ignore[no-untyped-def]
        buffer = bytearray(HASH_READ_BYTES)
        view = memoryview(buffer)
        while True:
            with self._cond:
                while self._visible_bytes <= self._hashed_bytes and not (self._closed or self._abandoned):
                    self._cond.wait()
                if self._abandoned:
                    return
                target = self._visible_bytes
                closing = self._closed
            while self._hashed_bytes < target:
                want = min(len(buffer), target - self._hashed_bytes)
                count = file.readinto(view[:want])
                if not count:
                    return  # finish() reports the short file
                self._digest.update(view[:count])
                self._hashed_bytes += count
            if closing:
                return
