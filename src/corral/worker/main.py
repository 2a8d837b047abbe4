"""The worker process (`corral worker`): register, serve files, obey NATS, heartbeat, shut down in order."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nats.aio.client import Client

from corral.bus import client as bus
from corral.bus.messages import LoadDefaults
from corral.bus.security import TlsFiles
from corral.config.errors import ConfigError
from corral.config.worker import WorkerSettings
from corral.gallery.index import DEFAULT_INDEX, GalleryError, GalleryRef, parse_galleries
from corral.gallery.installer import BackendInstaller
from corral.gallery.manager import BackendManager
from corral.gallery.registry import BackendRegistry
from corral.node import hardware
from corral.node.credentials import WorkerCredentials, first_registration, refresh_loop
from corral.node.heartbeat import Heartbeat
from corral.node.node_credential import NodeCredentialFile, default_state_dir
from corral.node.registration import FrontendClient
from corral.runtime.loops import OwnedTasks
from corral.telemetry import otlp
from corral.worker.addresses import WorkerAddresses, resolve_addresses
from corral.worker.backend_logs import BackendLogs
from corral.worker.drain import graceful_deregister
from corral.worker.handlers import NodeHandlers
from corral.worker.liveness import LivenessWatch
from corral.worker.log_handlers import LogHandlers
from corral.worker.model_ops import ModelOps
from corral.worker.ports import PortAllocator
from corral.worker.readiness import BackendProber
from corral.worker.supervisor import Supervisor

if TYPE_CHECKING:  # worker.files and what it imports (boto3's client) load when the worker starts
    from corral.staging.ephemeral_ledger import EphemeralLedger
    from corral.staging.s3 import ObjectStore
    from corral.worker.files import S3FileHandlers

log = logging.getLogger(__name__)

DEREGISTER_TIMEOUT_S = 10.0


class Worker:
    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings
        self.addresses: WorkerAddresses = resolve_addresses(
            addr=settings.addr,
            serve_addr=settings.serve_addr,
            grpc_max_port=settings.grpc_max_port,
            http_addr=settings.http_addr,
            advertise_addr=settings.advertise_addr,
            advertise_http_addr=settings.advertise_http_addr,
        )
        self.models_dir = Path(settings.models_path).resolve()
        self.node_name = settings.node_name or socket.gethostname()
        self.node_id = ""
        self.nats_up = False
        self.subscribed = False  # nodes.<id>.* handlers (backend and, in S3 mode, files) are listening
        self._stop = asyncio.Event()
        self.frontend = FrontendClient(settings.register_to, settings.registration_token)
        self.backend_logs = BackendLogs()
        self.backends = _backend_manager(settings)
        self.supervisor = Supervisor(
            PortAllocator(self.addresses.base_port, self.addresses.max_port),
            bind_host=self.addresses.serve_host,
            token=settings.registration_token,
            start_timeout_s=settings.backend_start_timeout_s,
            models_root=self.models_dir,
            logs=self.backend_logs,
            registry=self.backends.registry,
            prestart=settings.backend_prestart,
            stall_window_s=settings.backend_stall_window_s,
        )
        self.log_handlers = LogHandlers(self.backend_logs, lambda: (self.nc, self.node_id))
        self.prober = BackendProber(self.supervisor)
        self.liveness = LivenessWatch(self.supervisor.ready, self.supervisor.token)
        self.creds = WorkerCredentials()
        state_dir = Path(settings.state_dir) if settings.state_dir else default_state_dir(self.models_dir)
        self.credential_file = NodeCredentialFile(state_dir, self.node_name)
        self.nc: Client | None = None
        self.handlers: NodeHandlers | None = None
        self.s3_files: S3FileHandlers | None = None  # when LOCALAI_STORAGE_URL is set (issue 4)
        self.capability: str | None = None  # probed at the first registration (hardware.capability)
        self.heartbeat = Heartbeat(
            self.frontend,
            lambda: self.node_id,
            self._heartbeat_body_now,
            settings.heartbeat_interval_s,
            ready=lambda: self.nats_up,
            reregister=self._reregister,
        )

    def readiness(self) -> str | None:
        if not self.node_id:
            return "not registered with the frontend yet"
        if not self.nats_up:
            return "NATS connection is down: worker cannot receive work"
        if not self.subscribed:
            return "not yet subscribed to its work subjects on NATS"
        return self.prober.reason()

    async def _probe(self) -> hardware.HardwareFacts:
        return await asyncio.to_thread(
            hardware.probe, self.models_dir, sysfs_root=Path(self.settings.sysfs_root)
        )

    async def _registration(self) -> dict[str, Any]:
        facts = await self._probe()
        if self.capability is None:  # once: the GPU and its driver do not change under a running worker
            self.capability = await asyncio.to_thread(hardware.capability, facts, self.settings.capability)
            log.info("backend capability of this node: %s", self.capability)
        return self._registration_body(facts, self.capability)

    def _registration_body(self, facts: hardware.HardwareFacts, capability: str) -> dict[str, Any]:
        slots = max(1, self.settings.max_replicas_per_model)
        body: dict[str, Any] = {
            "name": self.node_name,
            "address": self.addresses.advertise_grpc,
            "http_address": self.addresses.advertise_http,
            "total_vram": facts.total_vram,
            "available_vram": facts.total_vram,
            "gpu_vendor": facts.gpu_vendor,
            "capability": capability,
            "max_replicas_per_model": slots,
            "total_ram": facts.total_ram,
            "available_ram": facts.available_ram,
            "labels": {**self.settings.node_labels, "node.replica-slots": str(slots)},
        }
        if facts.total_disk:
            body.update(total_disk=facts.total_disk, available_disk=facts.available_disk)
        if self.settings.registration_token:
            body["token"] = self.settings.registration_token
        if self.settings.vram_budget:
            body["vram_budget"] = self.settings.vram_budget
        return body

    def _heartbeat_body(self, facts: hardware.HardwareFacts) -> dict[str, Any]:
        body: dict[str, Any] = {"available_ram": facts.available_ram}
        if facts.gpu_known:  # omitted without GPU info, so the frontend keeps the last value
            body.update(
                available_vram=facts.available_vram, total_vram=facts.total_vram, gpu_vendor=facts.gpu_vendor
            )
        if facts.total_disk:
            body.update(total_disk=facts.total_disk, available_disk=facts.available_disk)
        return body

    async def _on_nats_state(self, up: bool) -> None:
        self.nats_up = up

    async def request_stop(self) -> None:
        self._stop.set()

    async def _register_once(self) -> dict[str, Any]:
        reply = await self.frontend.register(await self._registration(), attempts=1)
        await self._keep_node_token(reply)
        return reply

    async def _keep_node_token(self, reply: dict[str, Any]) -> None:
        """A first registration (or one after an admin re-key) returns the node's credential once: keep it."""
        token = str(reply.get("node_token") or "")
        if not token:
            return
        await asyncio.to_thread(self.credential_file.save, str(reply["id"]), token)
        self.frontend.use_node_token(token)
        log.info(
            "node credential for %s (%s) kept in %s", self.node_name, reply["id"], self.credential_file.path
        )

    async def _refresh_nats(self) -> dict[str, Any]:
        return await self.frontend.nats_credentials(self.node_id)

    async def _register(self) -> dict[str, Any]:
        reply = await self.frontend.register(await self._registration())
        await self._keep_node_token(reply)
        return reply

    async def _first_registration(self) -> dict[str, Any]:
        self.creds, reply = await first_registration(
            self.settings, self.creds, self._register_once, self._register
        )
        return reply

    async def _adopt(self, reply: dict[str, Any]) -> None:
        """Take a new registration: fresh credentials reconnect NATS; a new node id re-subscribes."""
        fresh = self.creds.adopt(reply)
        if fresh and self.nc is not None:
            await self.nc.force_reconnect()
        if reply["id"] != self.node_id:
            log.warning("node %s now registered as %s", self.node_id, reply["id"])
            self.node_id = reply["id"]
            if self.handlers is not None and self.nc is not None:
                await self.handlers.rebind(self.nc, self.node_id)
            if self.s3_files is not None and self.nc is not None:
                await self.s3_files.rebind(self.nc, self.node_id)

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stop.set)
        self.models_dir.mkdir(parents=True, exist_ok=True)
        leftovers = await asyncio.to_thread(self.backends.clean_leftovers)
        if leftovers:
            log.warning(
                "removed unfinished backend installs left by an earlier run: %s", ", ".join(leftovers)
            )
        async with self.started() as loops:
            return await self._wait_for_stop(*loops)

    @asynccontextmanager
    async def started(self) -> AsyncIterator[tuple[asyncio.Task[None], list[asyncio.Task[None]]]]:
        """Register, serve files, connect NATS and subscribe, then start the loops; each part is entered into
        one exit stack as it starts, so leaving (a stop, or a start that failed half way) closes what had
        started, the last started first: loops, drain and deregistration, backends, NATS, file server, S3
        handlers, the frontend client, the last spans. Yields (credential refresh, other loops)."""
        from corral.staging.ephemeral_sweep import run_sweeps, sweep_once
        from corral.worker.files import (
            build_ephemeral_ledger,
            build_worker_file_server,
            drop_hub_token,
            open_object_store,
        )

        async with AsyncExitStack() as stack:
            telemetry = await asyncio.to_thread(
                otlp.configure, "corral-worker"
            )  # backends inherit the OTEL_* env
            if telemetry is not None:
                stack.push_async_callback(asyncio.to_thread, telemetry.shutdown)
            stack.push_async_callback(self.frontend.close)
            self.frontend.use_node_token(await asyncio.to_thread(self.credential_file.load))
            store = await open_object_store(self.settings)  # before registering: work may arrive right after
            reply = await self._first_registration()
            self.node_id = reply["id"]
            log.info("registered as %s (%s), status %s", self.node_name, self.node_id, reply.get("status"))
            stack.callback(self._close_s3_files)  # after the file server stops, as NATS is gone by then

            drop_hub_token()
            ephemeral = build_ephemeral_ledger(self.settings, self.models_dir)
            await sweep_once([ephemeral.root], ephemeral)  # an earlier run's inputs, before new ones arrive
            http = build_worker_file_server(self.settings, self.models_dir, self.readiness, ephemeral)
            host, port = self.addresses.http_bind
            await http.start(host, port)
            stack.push_async_callback(http.stop)
            nc = await self._connect()
            stack.push_async_callback(nc.drain)
            stack.push_async_callback(self.supervisor.stop_all)  # before NATS drains
            await self._subscribe(nc, store, ephemeral)
            self.subscribed = True
            self.supervisor.keep_spares()
            log.info(
                "worker %s ready: gRPC base %d-%d, files on %s:%d",
                self.node_name,
                self.addresses.base_port,
                self.addresses.max_port,
                host,
                port,
            )
            stack.push_async_callback(self._deregister)  # drain first, once the loops have stopped
            loops_stop = asyncio.Event()
            tasks = [
                asyncio.create_task(self.heartbeat.run(loops_stop), name="heartbeat"),
                asyncio.create_task(self.prober.run(loops_stop), name="backend-probe"),
                asyncio.create_task(self.liveness.run(loops_stop), name="backend-liveness"),
                asyncio.create_task(self.log_handlers.run(loops_stop), name="backend-log-lines"),
                asyncio.create_task(
                    run_sweeps([ephemeral.root], ephemeral, loops_stop, delay_first=True),
                    name="ephemeral-sweep",
                ),
            ]
            refresh = asyncio.create_task(
                refresh_loop(self._refresh_nats, self.creds, self._adopt, loops_stop),
                name="nats-credential-refresh",
            )
            stack.push_async_callback(_stop_loops, loops_stop, [*tasks, refresh])
            stack.callback(log.info, "worker %s shutting down", self.node_name)
            yield refresh, tasks

    async def _subscribe(self, nc: Client, store: ObjectStore | None, ephemeral: EphemeralLedger) -> None:
        """The nodes.<id>.* handlers: backends, models, log lines, and the files in S3 mode."""
        from corral.worker.files import start_s3_file_handlers

        self.handlers = NodeHandlers(
            nc,
            self.node_id,
            self.supervisor,
            self.addresses.advertise_host,
            self.request_stop,
            self.backends,
            LoadDefaults(threads=self.settings.threads, context_size=self.settings.context_size),
            route_providers=[ModelOps(self.supervisor, self.models_dir).routes, self.log_handlers.routes],
        )
        await self.handlers.subscribe()
        self.s3_files = await start_s3_file_handlers(
            self.settings, nc, self.node_id, self.models_dir, store, ephemeral
        )

    async def _connect(self) -> Client:
        tls = TlsFiles(self.settings.nats_tls_ca, self.settings.nats_tls_cert, self.settings.nats_tls_key)
        nc = await bus.connect(
            self.settings.nats_url,
            f"corral-worker-{self.node_name}",
            self._on_nats_state,
            credentials=self.creds.for_connect(),
            tls=tls,
        )
        self.nc, self.nats_up = nc, nc.is_connected
        return nc

    async def _deregister(self) -> None:
        """Drain (the frontend routes no new work here, running calls finish), then deregister; bounded."""
        try:
            await asyncio.wait_for(
                graceful_deregister(
                    self.frontend, self.node_id, self.supervisor, self.settings.drain_timeout_s
                ),
                self.settings.drain_timeout_s + DEREGISTER_TIMEOUT_S,
            )
        except Exception as exc:  # the frontend may be gone already; shutdown continues
            log.warning("deregistration failed: %s", exc or type(exc).__name__)

    def _close_s3_files(self) -> None:
        if self.s3_files is not None:
            self.s3_files.close()

    async def _wait_for_stop(self, refresh: asyncio.Task[None], tasks: list[asyncio.Task[None]]) -> int:
        """0 on SIGTERM/SIGINT or `nodes.<id>.stop`; 1 when NATS credentials can no longer be renewed
        or a long-lived task (heartbeat, backend probe) ended: the process never runs on half-alive."""
        owned = OwnedTasks()
        owned.adopt(tasks)
        stop_wait = asyncio.create_task(self._stop.wait(), name="stop-signal")
        await asyncio.wait({stop_wait, refresh, *tasks}, return_when=asyncio.FIRST_COMPLETED)
        if refresh.done() and not refresh.cancelled() and refresh.exception() is not None:
            stop_wait.cancel()
            log.error("%s; exiting", refresh.exception())
            return 1
        stop_wait.cancel()
        died = await owned.until_stop(self._stop)  # credentials that never expire end `refresh` quietly
        if died is not None:
            log.error("%s; exiting", died)
            return 1
        return 0

    async def _heartbeat_body_now(self) -> dict[str, Any]:
        return self._heartbeat_body(await self._probe())

    async def _reregister(self) -> None:
        await self._adopt(await self._register_once())


async def _stop_loops(stop: asyncio.Event, tasks: list[asyncio.Task[None]]) -> None:
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _backend_manager(settings: WorkerSettings) -> BackendManager:
    """The backend registry and installer over LOCALAI_BACKENDS_PATH / LOCALAI_BACKENDS_SYSTEM_PATH."""
    backends_path = Path(settings.backends_path).expanduser().resolve()
    system_path = Path(settings.backends_system_path).expanduser() if settings.backends_system_path else None
    try:
        galleries = (
            parse_galleries(settings.backend_galleries)
            if settings.backend_galleries.strip()
            else [GalleryRef("corral", str(DEFAULT_INDEX))]
        )
    except GalleryError as exc:
        raise ConfigError(str(exc)) from None
    installer = BackendInstaller(
        backends_path,
        require_integrity=settings.require_backend_integrity,
        timeout_s=settings.backend_gallery_timeout_s,
    )
    return BackendManager(
        BackendRegistry(backends_path, system_path),
        installer,
        galleries,
        timeout_s=settings.backend_gallery_timeout_s,
    )
