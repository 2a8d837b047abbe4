"""Hash the frontend's configured model files before a request needs them.

Staging sends each file's SHA-256, which the worker checks against what it received. A file whose
hash is not recorded yet (no valid ``.sha256`` sidecar) is hashed during its first staging, on the
same CPUs as the transfer: on 2 cores a cold 241 MiB model's bytes land ~0.1 s later than with the
hash known (``benchmarks/cold_start_breakdown.py``). So at start, and when a model config is added or
edited, the frontend hashes those files one at a time in a thread of its own at a lower CPU priority
(nice +10: the request path always comes first) and records each hash beside its file, as staging
would. A staging that needs a file while it is being hashed joins that computation
(:mod:`corral.staging.local_hash`), so nothing is read twice.

Skipped: with ``--prehash-models=false`` (``CORRAL_PREHASH_MODELS``), with shared models (nothing is
staged), in all but the first ``--http-workers`` process, for files outside the models directory (a root
listed in ``CORRAL_MODEL_PATH_ROOTS`` included: corral writes no sidecar there, so the hash could not be
kept) and for files in a directory this process cannot write (the same).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from corral.models.config import ModelConfig
from corral.runtime.loops import done_before_stop
from corral.staging.hashing import read_trusted_hash
from corral.staging.local_hash import local_sha256
from corral.staging.plan import build_plan

log = logging.getLogger(__name__)

PREHASH_NICE = 10


class PrehashStopped(Exception):
    """The frontend is stopping: a pre-hash gives up mid-file (it would otherwise hold the exit for as long as
    the file takes to read)."""


def _lower_priority() -> None:
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), PREHASH_NICE)  # this thread only (Linux)
    except (OSError, AttributeError):
        pass


def _unrecorded_files(configs: Iterable[ModelConfig]) -> list[tuple[Path, int]]:
    """Local files (and sizes) of `configs` that staging would hash: no trusted sidecar, in a directory we can
    write."""
    found: dict[Path, int] = {}
    for cfg in configs:
        if cfg.huggingface is not None:
            continue  # fetched at its first load; hashed then
        try:
            files = build_plan(cfg).files
        except (OSError, ValueError) as exc:  # a missing or unreadable file: its load reports it
            log.debug("not pre-hashing %s: %s", cfg.name, exc)
            continue
        for planned in files:
            path = planned.local_path
            if (
                path in found
                or not planned.record_hash
                or not os.access(path.parent, os.W_OK)
                or read_trusted_hash(path) is not None
            ):
                continue
            found[path] = planned.size_bytes
    return list(found.items())


class ModelPrehasher:
    """One background thread that hashes configured model files; `submit` queues configs to look at."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="prehash", initializer=_lower_priority
        )
        self._queue: asyncio.Queue[list[ModelConfig]] = asyncio.Queue()
        self._stopping = threading.Event()  # read by the hashing thread at every chunk

    def _check_stop(self, _done_bytes: int, _total_bytes: int) -> None:
        if self._stopping.is_set():
            raise PrehashStopped("the frontend is stopping")

    def submit(self, configs: Iterable[ModelConfig]) -> None:
        self._queue.put_nowait(list(configs))

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                getting = asyncio.ensure_future(self._queue.get())
                if not await done_before_stop(getting, stop):
                    getting.cancel()
                    return
                await self._hash(getting.result(), stop)
        finally:
            self._stopping.set()
            self._executor.shutdown(wait=False, cancel_futures=True)

    async def _hash(self, configs: list[ModelConfig], stop: asyncio.Event) -> None:
        files = await asyncio.get_running_loop().run_in_executor(self._executor, _unrecorded_files, configs)
        for path, size_bytes in files:
            if stop.is_set():
                return
            started = time.monotonic()
            computing = local_sha256(path, self._check_stop, executor=self._executor)
            if not await done_before_stop(computing, stop):
                self._stopping.set()  # the thread gives up at its next chunk
                return
            try:
                computing.result()
            except PrehashStopped:
                return
            except OSError as exc:
                log.warning("pre-hashing %s failed (its first staging hashes it): %s", path, exc)
                continue
            log.info("pre-hashed %s (%d MiB) in %.2f s", path, size_bytes >> 20, time.monotonic() - started)
