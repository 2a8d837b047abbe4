"""One lock per file path, created on demand and dropped when nobody holds or waits for it."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path


class PathLocks:
    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[Path, tuple[threading.Lock, int]] = {}

    @contextlib.contextmanager
    def hold(self, path: Path) -> Iterator[None]:
        with self._guard:
            lock, users = self._locks.get(path, (threading.Lock(), 0))
            self._locks[path] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._locks[path]
                if users <= 1:
                    del self._locks[path]
                else:
                    self._locks[path] = (lock, users - 1)
