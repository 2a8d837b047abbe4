"""NATS handlers of `nodes.<id>.*` (reference §3.2): install, stop, exact model stop, running models."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from opentelemetry.trace import SpanKind

from corral.bus import subjects
from corral.bus.messages import (
    BackendInstallReply,
    BackendInstallRequest,
    BackendStopRequest,
    ModelsRunningReply,
    ModelStopReply,
    ModelStopRequest,
    RunningModel,
    ValidationError,
)
from corral.models.names import name_problem
from corral.telemetry import tracing
from corral.worker.ports import PortRangeExhausted
from corral.worker.supervisor import BackendStartFailed, BackendState, Supervisor

log = logging.getLogger(__name__)


def process_key(model_id: str, backend: str, replica_index: int) -> str:
    return f"{model_id or backend}#{replica_index}"


def _port_of(address: str) -> str:
    return address.rpartition(":")[2]


class NodeHandlers:
    def __init__(self, nc: Client, node_id: str, supervisor: Supervisor, advertise_host: str,
                 on_stop_node: Callable[[], Awaitable[None]]) -> None:
        self.nc, self.node_id, self.supervisor = nc, node_id, supervisor
        self.advertise_host = advertise_host
        self._on_stop_node = on_stop_node
        self._tasks: set[asyncio.Task[None]] = set()
        self._subscriptions: list[Subscription] = []

    async def subscribe(self) -> None:
        routes = {
            subjects.backend_install(self.node_id): self._install,
            subjects.backend_stop(self.node_id): self._backend_stop,
            subjects.model_stop(self.node_id): self._model_stop,
            subjects.models_running(self.node_id): self._models_running,
            subjects.node_stop(self.node_id): self._node_stop,
        }
        for subject, handler in routes.items():
            self._subscriptions.append(await self.nc.subscribe(subject, cb=self._spawn(handler)))
        await self.nc.flush(timeout=5)

    async def rebind(self, nc: Client, node_id: str) -> None:
        """Serve under a new node id and/or connection (re-registered after an admin deleted the node)."""
        for sub in self._subscriptions:
            try:
                await sub.unsubscribe()
            except Exception as exc:  # a closed connection has no subscriptions left to drop
                log.debug("unsubscribe failed: %s", exc)
        self._subscriptions.clear()
        self.nc, self.node_id = nc, node_id
        await self.subscribe()

    def _spawn(self, handler: Callable[[Msg], Awaitable[None]]) -> Callable[[Msg], Awaitable[None]]:
        """Each message runs in its own task: a slow install must not block a stop."""
        async def callback(msg: Msg) -> None:
            task = asyncio.create_task(self._guard(handler, msg))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return callback

    async def _guard(self, handler: Callable[[Msg], Awaitable[None]], msg: Msg) -> None:
        try:
            await handler(msg)
        except Exception:
            log.exception("handler for %s failed", msg.subject)

    async def _install(self, msg: Msg) -> None:
        if tracing.tracer is None:
            await self._install_backend(msg)
            return
        with tracing.span("worker.backend_install", {"corral.node_id": self.node_id}, kind=SpanKind.SERVER,
                          context=tracing.extract(msg.headers)):
            await self._install_backend(msg)

    async def _install_backend(self, msg: Msg) -> None:
        try:
            req = BackendInstallRequest.from_json(msg.data)
        except ValidationError as exc:
            await msg.respond(BackendInstallReply(success=False, error=f"invalid request: {exc}").to_json())
            return
        if not req.backend:
            await msg.respond(BackendInstallReply(success=False, error="backend is required").to_json())
            return
        if req.model_id and (problem := name_problem(req.model_id)) is not None:
            await msg.respond(BackendInstallReply(success=False, error=f"field 'model_id' {problem}").to_json())
            return
        key = process_key(req.model_id or "", req.backend, req.replica_index or 0)
        try:
            proc = await self.supervisor.ensure(key, req.backend)
        except (BackendStartFailed, PortRangeExhausted) as exc:
            log.warning("install of %s for %s failed: %s", req.backend, key, exc)
            await msg.respond(BackendInstallReply(success=False, error=str(exc)).to_json())
            return
        address = f"{self.advertise_host}:{proc.port}"
        await msg.respond(BackendInstallReply(success=True, address=address).to_json())

    async def _backend_stop(self, msg: Msg) -> None:
        try:
            req = BackendStopRequest.from_json(msg.data)
        except ValidationError:
            log.warning("ignoring malformed backend.stop payload")
            return
        for key in self.supervisor.resolve(req.backend):
            await self.supervisor.stop_key(key, force=bool(req.force))

    async def _model_stop(self, msg: Msg) -> None:
        try:
            req = ModelStopRequest.from_json(msg.data)
        except ValidationError as exc:
            await msg.respond(ModelStopReply(error=f"invalid request: {exc}").to_json())
            return
        proc = self.supervisor.processes.get(req.process_key)
        if proc is None:
            await msg.respond(ModelStopReply(terminated=True, process_key=req.process_key).to_json())
            return
        # Compare ports, not host strings: the worker dials 127.0.0.1, the frontend the advertised host.
        if req.expected_address and _port_of(req.expected_address) != str(proc.port):
            reply = ModelStopReply(matched=True, process_key=req.process_key, address=proc.local_address,
                                   error=f"address mismatch: process runs on port {proc.port}, "
                                         f"expected {req.expected_address}")
            await msg.respond(reply.to_json())
            return
        if proc.state is BackendState.STOPPING:
            await msg.respond(ModelStopReply(matched=True, process_key=req.process_key,
                                             error="process is already stopping").to_json())
            return
        matched, freed = await self.supervisor.stop_key(req.process_key, force=bool(req.force))
        reply = ModelStopReply(matched=matched, freed=freed, terminated=True, process_key=req.process_key,
                               address=f"{self.advertise_host}:{proc.port}")
        await msg.respond(reply.to_json())

    async def _models_running(self, msg: Msg) -> None:
        models = []
        for key, proc in self.supervisor.processes.items():
            if proc.state is not BackendState.READY or not proc.alive():
                continue
            model_id, _, replica = key.rpartition("#")
            models.append(RunningModel(model_id=model_id, replica_index=int(replica or 0),
                                       address=proc.local_address))
        await msg.respond(ModelsRunningReply(models=models).to_json())

    async def _node_stop(self, msg: Msg) -> None:
        await self._on_stop_node()
