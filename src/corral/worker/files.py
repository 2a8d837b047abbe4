"""Worker side of file staging: the file server's settings, and S3 mode's ``nodes.<id>.files.*`` handlers.

``files.ensure {key}`` fetches the object into the worker's cache -- the same directories HTTP staging
uses (``models/`` keys under the models dir) -- and replies ``local_path``. A cached copy whose sha256
matches the object's is used as is (nothing is downloaded). The download is refused up front when
the models filesystem cannot hold it, and reports progress on the requester's progress subject.
An ``ephemeral/`` key (a request's input) is reserved in the worker's ephemeral ledger first -- the same
ledger the file server's PUTs use -- and refused before the download when it does not fit.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

from corral.bus import subjects
from corral.bus.messages import Message, ValidationError
from corral.staging import hashing
from corral.staging.disk_space import DiskBudget, NotEnoughDisk
from corral.staging.ephemeral_ledger import (
    EphemeralLedger,
    EphemeralLimits,
    ephemeral_root,
    is_ephemeral_key,
    resolve_ephemeral_key,
)
from corral.staging.errors import InputStorageFull, KeyEscapesDirectory, ObjectStoreFailed
from corral.staging.file_server import ServerLimits, ThreadedFileServer
from corral.staging.keys import resolve_key, staging_dir
from corral.staging.messages import (
    FILES_ENSURE,
    FILES_LISTDIR,
    FILES_STAGE,
    FILES_TEMP,
    FileEnsureReply,
    FileEnsureRequest,
    FileListReply,
    FileListRequest,
    FileProgress,
    FileStageReply,
    FileStageRequest,
    FileTempReply,
)
from corral.staging.receiver import build_file_server
from corral.staging.s3 import ObjectStore, StorageConfig

log = logging.getLogger(__name__)

PROGRESS_INTERVAL_S = 0.5
HUB_TOKEN_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


def build_ephemeral_ledger(settings: Any, models_dir: Path) -> EphemeralLedger:
    """The worker's one ledger of request inputs (file server and S3 ``files.ensure`` share it); 0 in either
    capacity setting selects its filesystem-based default."""
    root = ephemeral_root(models_dir)
    limits = EphemeralLimits.resolve(
        settings.ephemeral_staging_byte_limit, settings.ephemeral_staging_min_free_bytes, root
    )
    log.info("ephemeral request inputs below %s: %s", root, limits.describe())
    return EphemeralLedger(root, limits)


def build_worker_file_server(
    settings: Any, models_dir: Path, readiness: Callable[[], str | None], ephemeral: EphemeralLedger
) -> ThreadedFileServer:
    """The file server with this worker's token, upload cap, disk admission and connection limits."""
    limits = ServerLimits(
        max_connections=settings.file_server_max_connections,
        header_timeout_s=settings.file_server_header_timeout_s,
        idle_timeout_s=settings.file_server_idle_timeout_s,
    )
    return build_file_server(
        models_dir,
        settings.registration_token,
        readiness=readiness,
        allow_unauthenticated=settings.allow_unauthenticated,
        max_upload_bytes=settings.max_upload_bytes,
        disk_budget=DiskBudget(settings.staging_min_free_bytes),
        limits=limits,
        ephemeral=ephemeral,
    )


def drop_hub_token() -> None:
    """Workers never use HF_TOKEN (the frontend downloads managed artifacts); keep it from backends."""
    for name in HUB_TOKEN_VARS:
        if os.environ.pop(name, None) is not None:
            log.warning(
                "%s is set in the worker's environment; workers never need it (the frontend "
                "downloads Hugging Face artifacts). Removed it so backend processes do not inherit it",
                name,
            )


async def open_object_store(settings: Any) -> ObjectStore | None:
    """The bucket client when ``LOCALAI_STORAGE_URL`` is set (boto3's import and client take a while: done
    before the worker registers, so it answers ``files.*`` as soon as the frontend can place work on it)."""
    config = StorageConfig.from_settings(settings)
    if config is None:
        return None
    store = await asyncio.to_thread(ObjectStore, config)
    log.info("S3 staging: fetching from bucket %s at %s on request", config.bucket, config.url)
    return store


async def start_s3_file_handlers(
    settings: Any,
    nc: Client,
    node_id: str,
    models_dir: Path,
    store: ObjectStore | None,
    ephemeral: EphemeralLedger | None = None,
) -> S3FileHandlers | None:
    """Subscribe ``nodes.<id>.files.*`` with the store `open_object_store` gave; None in HTTP mode.

    ``ephemeral`` is the worker's ledger (the one its file server uses); without one, a ledger with the
    filesystem-based default limits is made."""
    if store is None:
        return None
    if ephemeral is None:
        root = ephemeral_root(models_dir)
        ephemeral = EphemeralLedger(root, EphemeralLimits.resolve(0, 0, root))
    handlers = S3FileHandlers(
        nc, node_id, store, models_dir, DiskBudget(settings.staging_min_free_bytes), ephemeral
    )
    await handlers.subscribe()
    return handlers


class S3FileHandlers:
    def __init__(
        self,
        nc: Client,
        node_id: str,
        store: ObjectStore,
        models_dir: Path,
        budget: DiskBudget,
        ephemeral: EphemeralLedger,
    ) -> None:
        self.nc, self.node_id, self.store = nc, node_id, store
        self.models_dir, self.budget, self.ephemeral = models_dir, budget, ephemeral
        self.fetched_bytes = 0
        self._key_locks: dict[Path, asyncio.Lock] = {}
        self._subscriptions: list[Any] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def subscribe(self) -> None:
        routes: dict[str, Callable[[Msg], Awaitable[Message]]] = {
            FILES_ENSURE: self._ensure,
            FILES_STAGE: self._stage,
            FILES_TEMP: self._temp,
            FILES_LISTDIR: self._listdir,
        }
        for suffix, handler in routes.items():
            subject = subjects.node_subject(self.node_id, suffix)
            self._subscriptions.append(await self.nc.subscribe(subject, cb=self._spawn(handler)))
        await self.nc.flush(timeout=5)

    async def rebind(self, nc: Client, node_id: str) -> None:
        """Re-subscribe under a new node id (the frontend re-registered this worker)."""
        for subscription in self._subscriptions:
            await subscription.unsubscribe()
        self._subscriptions.clear()
        self.nc, self.node_id = nc, node_id
        await self.subscribe()

    def close(self) -> None:
        self.store.close()

    def _spawn(self, handler: Callable[[Msg], Awaitable[Message]]) -> Callable[[Msg], Awaitable[None]]:
        async def callback(msg: Msg) -> None:
            task = asyncio.create_task(self._answer(handler, msg))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        return callback

    async def _answer(self, handler: Callable[[Msg], Awaitable[Message]], msg: Msg) -> None:
        try:
            reply = await handler(msg)
        except (ValidationError, ValueError) as exc:
            reply = FileEnsureReply(error=f"invalid request on {msg.subject}: {exc}")
        except (KeyEscapesDirectory, ObjectStoreFailed, NotEnoughDisk, InputStorageFull, OSError) as exc:
            reply = FileEnsureReply(error=f"{msg.subject}: {exc}")
        if msg.reply:
            await msg.respond(reply.to_json())

    async def _ensure(self, msg: Msg) -> Message:
        request = FileEnsureRequest.from_json(msg.data)
        if not is_ephemeral_key(request.key):
            path = resolve_key(request.key, self.models_dir)
            async with self._key_locks.setdefault(path, asyncio.Lock()):  # one fetch per file at a time
                return await self._ensure_locked(request, path, reserve=None)
        path = resolve_ephemeral_key(request.key, self.models_dir)
        async with self._key_locks.setdefault(path, asyncio.Lock()):
            try:
                return await self._ensure_locked(request, path, reserve=self.ephemeral)
            finally:
                self.ephemeral.settle(request.key, await asyncio.to_thread(path.is_file))

    async def _ensure_locked(
        self,
        request: FileEnsureRequest,
        path: Path,
        reserve: EphemeralLedger | None,
    ) -> Message:
        stored = await asyncio.to_thread(self.store.head, request.key)
        if stored is None:
            return FileEnsureReply(error=f"key {request.key!r} is not in bucket {self.store.bucket!r}")
        if reserve is not None and not reserve.holds(
            request.key
        ):  # a request input: reserved before a byte lands
            reserve.reserve(request.key, stored.size_bytes)
        wanted = request.sha256 or stored.sha256
        if stored.sha256 and request.sha256 and stored.sha256 != request.sha256:
            return FileEnsureReply(
                error=f"bucket object {request.key!r} has sha256 {stored.sha256}, the frontend "
                f"expected {request.sha256}; stage it again"
            )
        if await asyncio.to_thread(_cached_copy_matches, path, stored.size_bytes, wanted):
            log.info("files.ensure %s: cached copy at %s is current; nothing fetched", request.key, path)
            return FileEnsureReply(local_path=str(path), fetched_bytes=0)
        await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
        with self.budget.reserve(path.parent, stored.size_bytes, f"key {request.key!r}"):
            await self._download(request, path, stored.size_bytes)
        actual = await asyncio.to_thread(hashing.sha256_file, path)
        if wanted and actual != wanted:
            await asyncio.to_thread(_remove, path)
            return FileEnsureReply(
                error=f"fetched {request.key!r} has sha256 {actual}, expected {wanted}; "
                "the bucket object is corrupt: stage it again"
            )
        await asyncio.to_thread(hashing.record_hash, path, actual)
        self.fetched_bytes += stored.size_bytes
        log.info("files.ensure %s: fetched %d bytes into %s", request.key, stored.size_bytes, path)
        return FileEnsureReply(local_path=str(path), fetched_bytes=stored.size_bytes)

    async def _download(self, request: FileEnsureRequest, path: Path, total_bytes: int) -> None:
        done = [0]

        def on_chunk(count: int) -> None:  # boto3 threads; read by the publisher below
            done[0] += count

        async def publish_progress() -> None:
            while True:
                await asyncio.sleep(PROGRESS_INTERVAL_S)
                if request.progress_subject:
                    event = FileProgress(key=request.key, bytes_done=done[0], total_bytes=total_bytes)
                    await self.nc.publish(request.progress_subject, event.to_json())

        publisher = asyncio.create_task(publish_progress(), name="files-ensure-progress")
        try:
            await asyncio.to_thread(self.store.download, request.key, path, on_chunk)
        finally:
            publisher.cancel()
        if request.progress_subject:
            event = FileProgress(key=request.key, bytes_done=total_bytes, total_bytes=total_bytes)
            await self.nc.publish(request.progress_subject, event.to_json())

    async def _stage(self, msg: Msg) -> Message:
        request = FileStageRequest.from_json(msg.data)
        local = Path(request.local_path)
        if not _inside_worker_dirs(local, self.models_dir):
            return FileStageReply(
                error=f"local_path {request.local_path!r} is outside the worker's directories"
            )
        sha = await asyncio.to_thread(hashing.cached_sha256, local)
        await asyncio.to_thread(self.store.upload, local, request.key, sha, None)
        return FileStageReply(key=request.key)

    async def _temp(self, msg: Msg) -> Message:
        directory = staging_dir(self.models_dir)
        await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
        fd, name = await asyncio.to_thread(
            tempfile.mkstemp, dir=directory, prefix="localai-output-", suffix=".tmp"
        )
        os.close(fd)
        return FileTempReply(local_path=name)

    async def _listdir(self, msg: Msg) -> Message:
        request = FileListRequest.from_json(msg.data)
        directory = resolve_key(request.key_prefix.rstrip("/"), self.models_dir)
        if not directory.is_dir():
            return FileListReply(error=f"directory not found for key prefix {request.key_prefix!r}")
        files = sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file())
        return FileListReply(files=files or None)


def _cached_copy_matches(path: Path, size_bytes: int, sha256: str | None) -> bool:
    try:
        if os.stat(path).st_size != size_bytes or hashing.read_target_hash(path) is not None:
            return False
    except OSError:
        return False
    return sha256 is None or hashing.cached_sha256(path) == sha256


def _inside_worker_dirs(path: Path, models_dir: Path) -> bool:
    real = os.path.realpath(path)
    base = os.path.realpath(Path(os.path.abspath(models_dir)).parent)
    return real.startswith(base.rstrip(os.sep) + os.sep) and os.path.isfile(real)


def _remove(path: Path) -> None:
    path.unlink(missing_ok=True)
    hashing.remove_sidecars(path)
