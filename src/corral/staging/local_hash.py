"""The SHA-256 of a local file, computed once at a time per file in this process.

Staging a file whose hash is not recorded yet (no valid ``.sha256`` sidecar) hashes it in a thread;
so does the frontend's pre-hashing of configured models (:mod:`corral.staging.prehash`). Whoever asks
while a computation of the same file runs joins it instead of reading the file a second time. The
result is recorded beside the file by :func:`corral.staging.hashing.cached_sha256`, so the next ask
costs a stat.
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import Executor
from pathlib import Path

from corral.staging.hashing import ProgressCallback, cached_sha256

_running: dict[str, asyncio.Future[str]] = {}


def local_sha256(
    path: Path,
    report: ProgressCallback | None = None,
    *,
    executor: Executor | None = None,
    record: bool = True,
) -> asyncio.Future[str]:
    """A future of `path`'s hash: the computation already running for it, or a new one in `executor` (the
    loop's default when None). `report` gets the progress of a new computation only; `record=False` writes no
    sidecar (a file outside the models directory). Never cancel the future: others may be waiting on it (stop
    awaiting it instead)."""
    key = os.path.abspath(path)
    running = _running.get(key)
    if running is not None and not running.done():
        return running
    future = asyncio.get_running_loop().run_in_executor(executor, cached_sha256, Path(key), report, record)
    _running[key] = future

    def forget(done: asyncio.Future[str]) -> None:
        if _running.get(key) is done:
            del _running[key]
        if not done.cancelled():
            done.exception()  # reported to whoever awaits it; never "exception was never retrieved"

    future.add_done_callback(forget)
    return future
