"""NATS handlers of `nodes.<id>.*` (reference §3.2): backend operations (backend_ops.py), stop, exact model
stop, running models."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from corral.bus import subjects
from corral.bus.messages import (
    BackendStopRequest,
    LoadDefaults,
    ModelsRunningReply,
    ModelStopReply,
    ModelStopRequest,
    RunningModel,
    ValidationError,
)
from corral.gallery.manager import BackendManager
from corral.worker.backend_ops import BackendOps, process_key
from corral.worker.supervisor import BackendState, Supervisor

log = logging.getLogger(__name__)

RouteProvider = Callable[[str], dict[str, Callable[[Msg], Awaitable[None]]]]  # node id -> subject: handler


__all__ = ["NodeHandlers", "process_key"]


def _port_of(address: str) -> str:
    return address.rpartition(":")[2]


class NodeHandlers:
    def __init__(
        self,
        nc: Client,
        node_id: str,
        supervisor: Supervisor,
        advertise_host: str,
        on_stop_node: Callable[[], Awaitable[None]],
        backends: BackendManager,
        load_defaults: LoadDefaults | None = None,
        route_providers: Sequence[RouteProvider] = (),
    ) -> None:
        self.nc, self.node_id, self.supervisor = nc, node_id, supervisor
        self.advertise_host = advertise_host
        self.backend_ops = BackendOps(
            backends, supervisor, advertise_host, lambda: (self.nc, self.node_id), load_defaults
        )
        self._on_stop_node = on_stop_node
        self._tasks: set[asyncio.Task[None]] = set()
        self._subscriptions: list[Subscription] = []
        # Other modules' handlers (model ops, backend logs): node id -> {subject: handler}, re-bound with ours.
        self.route_providers = list(route_providers)  # more nodes.<id>.* routes (model ops, log lines)

    async def subscribe(self) -> None:
        routes: dict[str, Callable[[Msg], Awaitable[None]]] = {
            **self.backend_ops.routes(self.node_id),
            subjects.backend_stop(self.node_id): self._backend_stop,
            subjects.model_stop(self.node_id): self._model_stop,
            subjects.models_running(self.node_id): self._models_running,
            subjects.node_stop(self.node_id): self._node_stop,
        }
        for provider in self.route_providers:
            routes.update(provider(self.node_id))
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
            reply = ModelStopReply(
                matched=True,
                process_key=req.process_key,
                address=proc.local_address,
                error=f"address mismatch: process runs on port {proc.port}, expected {req.expected_address}",
            )
            await msg.respond(reply.to_json())
            return
        if proc.state is BackendState.STOPPING:
            await msg.respond(
                ModelStopReply(
                    matched=True, process_key=req.process_key, error="process is already stopping"
                ).to_json()
            )
            return
        matched, freed = await self.supervisor.stop_key(req.process_key, force=bool(req.force))
        reply = ModelStopReply(
            matched=matched,
            freed=freed,
            terminated=True,
            process_key=req.process_key,
            address=f"{self.advertise_host}:{proc.port}",
        )
        await msg.respond(reply.to_json())

    async def _models_running(self, msg: Msg) -> None:
        models = []
        for key, proc in self.supervisor.processes.items():
            if proc.state is not BackendState.READY or not proc.alive():
                continue
            model_id, _, replica = key.rpartition("#")
            models.append(
                RunningModel(model_id=model_id, replica_index=int(replica or 0), address=proc.local_address)
            )
        await msg.respond(ModelsRunningReply(models=models).to_json())

    async def _node_stop(self, msg: Msg) -> None:
        await self._on_stop_node()
