"""NATS handlers of a worker's backend operations (reference §3.2): install, upgrade, delete, list.

`backend.install` installs a missing backend from the galleries (progress events on
`nodes.<id>.backend.install.<op_id>.progress` when the request has an `op_id`), then starts or
reuses the process for `model#replica`. Upgrade and delete hold the backend's lock while they
stop exactly that backend's processes and replace or remove its files, and reply the stopped keys.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from nats.aio.client import Client
from nats.aio.msg import Msg
from opentelemetry.trace import SpanKind
from pydantic import ValidationError as PydanticValidationError

from corral.bus import subjects
from corral.bus.messages import (
    BackendDeleteReply,
    BackendDeleteRequest,
    BackendInstallProgressEvent,
    BackendInstallReply,
    BackendInstallRequest,
    BackendListReply,
    BackendUpgradeReply,
    BackendUpgradeRequest,
    LoadDefaults,
    NodeBackendInfo,
    ValidationError,
)
from corral.gallery.index import GalleryEntry, GalleryError, GalleryRef, is_url
from corral.gallery.installer import InstallError
from corral.gallery.manager import BackendManager, ProgressListener
from corral.gallery.progress import ProgressDebouncer, progress_event
from corral.gallery.registry import InstalledBackend
from corral.models.names import InvalidBackendName, backend_name_problem, name_problem
from corral.telemetry import tracing
from corral.worker.ports import PortRangeExhausted
from corral.worker.supervisor import BackendStartFailed, Supervisor

log = logging.getLogger(__name__)

OP_ID_MAX_CHARS = 128
INSTALL_FAILURES = (GalleryError, InstallError, InvalidBackendName)


def process_key(model_id: str, backend: str, replica_index: int) -> str:
    return f"{model_id or backend}#{replica_index}"


def external_entry(
    backend: str, uri: str | None, name: str | None, alias: str | None
) -> tuple[GalleryEntry, GalleryRef] | None:
    """The request's own install source (reference: `uri` + `name`/`alias`, an external install), if any.

    `uri` must be an absolute path or an http(s) URL of a directory or archive; GalleryError otherwise.
    """
    if not uri:
        return None
    if not (uri.startswith("/") or is_url(uri)):
        raise GalleryError(f"field 'uri' must be an absolute path or an http(s) URL, got {uri[:200]!r}")
    try:
        entry = GalleryEntry(
            name=name or backend, alias=alias or (backend if name and name != backend else None), uri=uri
        )
    except PydanticValidationError as exc:
        first = exc.errors()[0]
        raise GalleryError(f"field {'.'.join(str(p) for p in first['loc'])!r}: {first['msg']}") from None
    return entry, GalleryRef("request uri", uri)


class BackendOps:
    def __init__(
        self,
        manager: BackendManager,
        supervisor: Supervisor,
        advertise_host: str,
        bus: Callable[[], tuple[Client, str]],
        load_defaults: LoadDefaults | None = None,
    ) -> None:
        self.manager = manager
        self.supervisor = supervisor
        self.advertise_host = advertise_host
        self.load_defaults = load_defaults  # told with every started process: its LoadModel takes them
        self._bus = bus  # (connection, node id) now: both change when the worker re-registers

    def routes(self, node_id: str) -> dict[str, Callable[[Msg], Awaitable[None]]]:
        return {
            subjects.backend_install(node_id): self.install,
            subjects.backend_upgrade(node_id): self.upgrade,
            subjects.backend_delete(node_id): self.delete,
            subjects.backend_list(node_id): self.list_backends,
        }

    def _progress(self, op_id: str | None, backend: str) -> ProgressDebouncer | None:
        if not op_id:
            return None
        nc, node_id = self._bus()
        subject = subjects.backend_install_progress(node_id, op_id)

        async def publish(event: BackendInstallProgressEvent) -> None:
            await nc.publish(subject, event.to_json())

        def make(
            phase: str, file_name: str, current: int, total: int, is_bytes: bool
        ) -> BackendInstallProgressEvent:
            return progress_event(op_id, node_id, backend, phase, file_name, current, total, is_bytes)

        return ProgressDebouncer(asyncio.get_running_loop(), publish, make)

    async def _ensure_installed(
        self,
        backend: str,
        galleries: list[GalleryRef],
        progress: ProgressDebouncer | None,
        direct: tuple[GalleryEntry, GalleryRef] | None = None,
    ) -> InstalledBackend:
        listener: ProgressListener | None = progress.report if progress else None
        try:
            return await self.manager.ensure(backend, galleries, listener, direct)
        finally:
            if progress is not None:
                await progress.flush()

    async def install(self, msg: Msg) -> None:
        if tracing.tracer is None:
            reply = await self._install(msg.data)
        else:  # the install joins the trace of the load that asked for it (traceparent in the NATS headers)
            with tracing.span(
                "worker.backend_install", kind=SpanKind.SERVER, context=tracing.extract(msg.headers)
            ):
                reply = await self._install(msg.data)
        await msg.respond(reply.to_json())

    async def _install(self, data: bytes) -> BackendInstallReply:
        try:
            req = BackendInstallRequest.from_json(data)
        except ValidationError as exc:
            return BackendInstallReply(success=False, error=f"invalid request: {exc}")
        if (problem := backend_name_problem(req.backend)) is not None:
            return BackendInstallReply(success=False, error=f"field 'backend' {problem}")
        if req.model_id and (problem := name_problem(req.model_id)) is not None:
            return BackendInstallReply(success=False, error=f"field 'model_id' {problem}")
        if req.replica_index is not None and not 0 <= req.replica_index < 1 << 31:
            return BackendInstallReply(success=False, error="field 'replica_index' must be 0..2147483647")
        if req.op_id is not None and len(req.op_id) > OP_ID_MAX_CHARS:
            return BackendInstallReply(
                success=False,
                error=f"field 'op_id' must be at most {OP_ID_MAX_CHARS} "
                "characters (it becomes a NATS subject token)",
            )
        key = process_key(req.model_id or "", req.backend, req.replica_index or 0)
        progress = self._progress(req.op_id, req.backend)
        try:
            direct = external_entry(req.backend, req.uri, req.name, req.alias)
            galleries = self.manager.galleries_for(req.backend_galleries)
            if req.force and direct is None:  # legacy upgrade semantics: reinstall, then start
                await self._upgrade(req.backend, galleries, progress)
            installed = await self._ensure_installed(req.backend, galleries, progress, direct)
            if progress is not None:
                progress.report("starting", installed.name, 0, 0, False)
                await progress.flush()
            async with self.manager.shared(installed.name):  # no upgrade or delete replaces it meanwhile
                current = await self.manager.find(installed.name)
                if current is None:
                    raise InstallError(
                        f"backend {installed.name!r} was deleted while this install waited; install it again"
                    )
                proc = await self.supervisor.ensure(key, current)
        except INSTALL_FAILURES as exc:
            log.warning("install of backend %s for %s failed: %s", req.backend, key, exc)
            return BackendInstallReply(success=False, error=str(exc))
        except (BackendStartFailed, PortRangeExhausted) as exc:
            log.warning("start of backend %s for %s failed: %s", req.backend, key, exc)
            return BackendInstallReply(success=False, error=str(exc))
        return BackendInstallReply(
            success=True, address=f"{self.advertise_host}:{proc.port}", load_defaults=self.load_defaults
        )

    async def _stop_backend(self, installed: InstalledBackend | None, name: str) -> list[str]:
        names = {name}
        if installed is not None:
            names |= {installed.name, installed.metadata.name}
            if installed.metadata.alias:
                names.add(installed.metadata.alias)
        keys = self.supervisor.keys_of_backend(names)
        await asyncio.gather(
            *(self.supervisor.stop_key(key) for key in keys), self.supervisor.drop_spares(names)
        )  # not replicas: not reported
        return keys

    async def _upgrade(
        self, name: str, galleries: list[GalleryRef], progress: ProgressDebouncer | None
    ) -> list[str]:
        async with self.manager.lock(await self.manager.canonical(name)):
            installed = await self.manager.find(name)
            if installed is not None and installed.is_system:
                raise InstallError(
                    f"backend {name!r} is a system backend ({installed.directory}); "
                    "it cannot be upgraded from a gallery"
                )
            stopped = await self._stop_backend(installed, name)
            try:
                await self.manager.reinstall(name, galleries, progress.report if progress else None)
            finally:
                if progress is not None:
                    await progress.flush()
            return stopped

    async def upgrade(self, msg: Msg) -> None:
        try:
            req = BackendUpgradeRequest.from_json(msg.data)
        except ValidationError as exc:
            await msg.respond(BackendUpgradeReply(error=f"invalid request: {exc}").to_json())
            return
        if (problem := backend_name_problem(req.backend)) is not None:
            await msg.respond(BackendUpgradeReply(error=f"field 'backend' {problem}").to_json())
            return
        if req.op_id is not None and len(req.op_id) > OP_ID_MAX_CHARS:
            await msg.respond(
                BackendUpgradeReply(
                    error=f"field 'op_id' must be at most {OP_ID_MAX_CHARS} characters"
                ).to_json()
            )
            return
        try:
            stopped = await self._upgrade(
                req.backend,
                self.manager.galleries_for(req.backend_galleries),
                self._progress(req.op_id, req.backend),
            )
        except INSTALL_FAILURES as exc:
            log.warning("upgrade of backend %s failed: %s", req.backend, exc)
            await msg.respond(BackendUpgradeReply(error=str(exc), reports_stopped_processes=True).to_json())
            return
        await msg.respond(
            BackendUpgradeReply(
                success=True, stopped_process_keys=stopped, reports_stopped_processes=True
            ).to_json()
        )

    async def delete(self, msg: Msg) -> None:
        try:
            req = BackendDeleteRequest.from_json(msg.data)
        except ValidationError as exc:
            await msg.respond(BackendDeleteReply(error=f"invalid request: {exc}").to_json())
            return
        if (problem := backend_name_problem(req.backend)) is not None:
            await msg.respond(BackendDeleteReply(error=f"field 'backend' {problem}").to_json())
            return
        await msg.respond((await self._delete(req.backend)).to_json())

    async def _delete(self, name: str) -> BackendDeleteReply:
        async with self.manager.lock(await self.manager.canonical(name)):
            installed = await self.manager.find(name)  # resolve name and alias before removing files
            if installed is not None and installed.is_system:
                return BackendDeleteReply(
                    error=f"backend {name!r} is a system backend ({installed.directory}); "
                    "it cannot be deleted",
                    reports_stopped_processes=True,
                )
            stopped = await self._stop_backend(installed, name)
            survivors = [key for key in stopped if key in self.supervisor.processes]
            if survivors:
                return BackendDeleteReply(
                    error=f"processes {survivors} of backend {name!r} did not stop; files kept",
                    stopped_process_keys=stopped,
                    reports_stopped_processes=True,
                )
            if installed is None:
                return BackendDeleteReply(
                    error=f"backend {name!r} is not installed",
                    stopped_process_keys=stopped,
                    reports_stopped_processes=True,
                )
            try:
                await self.manager.remove(installed.name)
            except OSError as exc:
                return BackendDeleteReply(
                    error=f"cannot remove backend {name!r}: {exc}",
                    stopped_process_keys=stopped,
                    reports_stopped_processes=True,
                )
        return BackendDeleteReply(success=True, stopped_process_keys=stopped, reports_stopped_processes=True)

    async def list_backends(self, msg: Msg) -> None:
        infos = [
            NodeBackendInfo(
                name=b.name,
                is_system=b.is_system,
                is_meta=b.metadata.is_meta,
                installed_at=b.metadata.installed_at,
                gallery_url=b.metadata.gallery_url,
                version=b.metadata.version,
                uri=b.metadata.uri,
                digest=b.metadata.digest,
            )
            for b in await self.manager.installed()
        ]
        await msg.respond(BackendListReply(backends=infos).to_json())
