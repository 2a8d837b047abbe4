"""Route a request to a replica: warm (in-memory view, then PostgreSQL) or cold (loading's cold path).

The router picks replicas; the cold path (claim the model's durable load job, wait for it) is
loading's `ColdLoads`, built with the evictor and the runner where the frontend is assembled.
"""

from __future__ import annotations

import asyncio
import logging
from typing import cast

import asyncpg
import nats.errors

from corral.loading.context import LoadContext
from corral.loading.request_wait import ColdLoads
from corral.models.config import ModelConfig
from corral.placement.rules import SchedulingRule
from corral.proto import backend_pb2
from corral.routing import events, prefix_sync
from corral.routing.backend_client import BackendChannels
from corral.routing.eviction import Evictor
from corral.routing.local_replicas import LocalReplicas
from corral.routing.prefix_index import message_text, prefix_chain
from corral.routing.queue import ModelQueue, QueueSettings, replica_slots
from corral.routing.replica import Replica, replica_key
from corral.runtime.loops import run_periodic
from corral.store import replicas as replica_store
from corral.store import scheduling as scheduling_store
from corral.telemetry import tracing
from corral.telemetry.families import ROUTING_DECISIONS
from corral.telemetry.labels import PerModel
from corral.tenancy.caller import Caller, current
from corral.tenancy.usage import NONE, NoUsage, UsageSink, counts_of

log = logging.getLogger(__name__)

VIEW_REFRESH_S = 10.0
QUEUE_POKE_S = 0.5  # the other frontends' in-flight counts fall without an event here: look again this often


class Router:
    def __init__(
        self,
        ctx: LoadContext,
        replicas: LocalReplicas,
        cold: ColdLoads,
        evictor: Evictor,
        queue: QueueSettings | None = None,
        usage: UsageSink | None = None,
    ) -> None:
        """`queue`: the per-model queue's slots and bounds (routing/queue.py); `usage`: where the engine's token
        counts of every call go (tenancy/usage.py), besides the queue's fair share."""
        self.ctx, self.replicas, self.cold, self.evictor = ctx, replicas, cold, evictor
        self.queue = ModelQueue(queue or QueueSettings(), self._capacity, slots_of=self.slots_of)
        self._slots: dict[
            str, tuple[ModelConfig, int]
        ] = {}  # model -> (the config they were read from, slots)
        self.usage: UsageSink = usage or NoUsage()
        self.active, self.view, self.inflight = replicas.active, replicas.view, replicas.inflight
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._probes: set[asyncio.Task[None]] = set()  # node_left's checks of busy backends
        self._warm, self._cold_routes = (
            PerModel(ROUTING_DECISIONS, "warm"),
            PerModel(ROUTING_DECISIONS, "cold"),
        )

    @property
    def channels(self) -> BackendChannels:
        """The concrete channels (budgets, health probes) behind the loading context's stub protocol."""
        return cast(BackendChannels, self.ctx.channels)

    def _local_replicas(self) -> list[Replica]:
        return self.replicas.all()

    async def start(self) -> None:
        await self.cold.start()
        await self.inflight.start()
        await events.subscribe(self.ctx.nc, self._on_event)
        await prefix_sync.subscribe(self.ctx.nc, self.view.policies.index, self.replicas.frontend_id)
        await self.refresh()
        self._tasks = [
            asyncio.create_task(self.inflight.run(self._stop), name="inflight-reports"),
            asyncio.create_task(self._refresh_loop(), name="replica-view-refresh"),
            asyncio.create_task(self._poke_loop(), name="queue-poke"),
        ]

    def slots_of(self, model: str) -> int:
        """One replica's slots for `model` (routing/queue.py `replica_slots`), as its config last seen says."""
        known = self._slots.get(model)
        return known[1] if known is not None else replica_slots((), self.queue.settings.slots)

    def _capacity(self, model: str) -> int:
        """Slots this frontend may fill for `model`: its replicas' slots less the other frontends' requests on them;
        one replica's worth with none yet (those requests wait for the cold load, the rest in the queue)."""
        replicas = self.view.replicas_of(model)
        return self.slots_of(model) * max(1, len(replicas)) - self.inflight.remote_sum(replicas)

    async def _poke_loop(self) -> None:
        while not self._stop.is_set():
            await asyncio.sleep(QUEUE_POKE_S)
            self.queue.poke()

    async def refresh(self) -> None:
        """Re-read every routable replica and the routing policies: a missed event heals within one interval."""
        self.view.policies.replace_rules(await scheduling_store.all_rules(self.ctx.pool), self.ctx.aliases)
        rows = await replica_store.all_routable(self.ctx.pool)
        self.view.replace_all(
            Replica(
                model=r["model_name"],
                node_id=r["node_id"],
                node_name=r["node_name"],
                address=r["address"],
                replica_index=int(r["replica_index"]),
            )
            for r in rows
        )
        self.queue.poke()

    async def _refresh_loop(self) -> None:
        await run_periodic("replica view refresh", self.refresh, VIEW_REFRESH_S, self._stop, delay_first=True)

    @property
    def background_tasks(self) -> list[asyncio.Task[None]]:
        """The router's long-lived tasks, for the process that owns it to watch."""
        return list(self._tasks)

    async def _on_event(self, event: events.ReplicaEvent) -> None:
        """A NATS event is a hint, never a route: an address is routed to only after PostgreSQL says so.

        `loaded` re-reads the model's routable replicas (anyone on the bus can publish an event);
        a removal is applied at once (removing is always safe) and its eviction mark acknowledged.
        """
        if event.op == events.LOADED:
            try:
                await self._adopt_routable(event.model)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                log.warning(
                    "replica event for %s not applied (PostgreSQL unavailable: %s); the next view "
                    "refresh catches up",
                    event.model,
                    exc,
                )
        else:
            self.view.remove_key(event.model, replica_key(event.node_id, event.model, event.replica_index))
        if event.mark:
            self.inflight.acks.add(event.mark)

    async def _adopt_routable(self, model: str) -> None:
        """Make the view of `model` exactly its routable replicas in PostgreSQL."""
        rows = await replica_store.routable(self.ctx.pool, model)
        fresh = {replica_key(r["node_id"], model, int(r["replica_index"])) for r in rows}
        for known in [r for r in self.view.all() if r.model == model and r.key not in fresh]:
            self.view.remove(known)
        for row in rows:
            self.view.add(
                Replica(
                    model=model,
                    node_id=row["node_id"],
                    node_name=row["node_name"],
                    address=row["address"],
                    replica_index=int(row["replica_index"]),
                )
            )
        self.queue.dispatch(model)

    def apply_route_rule(self, rule: SchedulingRule) -> None:
        self.view.policies.set_rule(rule, self.ctx.aliases)

    def forget_route_rule(self, name: str) -> None:
        self.view.policies.forget_rule(self.ctx.aliases.get(name, name))

    def prefix_chain(self, cfg: ModelConfig, request: backend_pb2.PredictOptions) -> list[int] | None:
        """The prompt's block hashes when the model routes by prefix cache among several replicas, else None
        (nothing hashed: a lone replica needs no choice; after a scale-up its conversations re-home once)."""
        if self.view.count(cfg.name) < 2 or self.view.policies.get(cfg.name).picker != "prefix_cache":
            return None
        text = message_text(request.Prompt, [(m.role, m.content) for m in request.Messages])
        return prefix_chain(cfg.name, text) or None

    async def route(self, cfg: ModelConfig, chain: list[int] | None = None) -> Replica:
        """Warm path: memory only. Cold path: a durable load job."""
        replica = self.view.pick(cfg.name, chain)
        if replica is not None:
            self._warm.count(cfg.name)
        else:
            self._cold_routes(cfg.name).inc()
            with tracing.span("corral.cold_path", {"corral.model": cfg.name}):
                replica = await self._cold(cfg)
        self.view.touch(replica)
        return replica

    async def _observe(self, cfg: ModelConfig, chain: list[int], replica: Replica) -> None:
        """Remember where this prompt went, and tell the other frontends when that is news."""
        if self.view.policies.index.observe(chain, replica.key):
            try:
                await prefix_sync.publish(
                    self.ctx.nc,
                    self.replicas.frontend_id,
                    cfg.name,
                    chain,
                    replica.node_id,
                    replica.replica_index,
                )
            except (nats.errors.Error, OSError) as exc:  # a lost observation costs peers a cache miss
                log.debug("prefix observation not shared: %s", exc)

    async def _warm_from_db(self, cfg: ModelConfig) -> Replica | None:
        for row in await replica_store.routable(self.ctx.pool, cfg.name):
            self.view.add(
                Replica(
                    model=cfg.name,
                    node_id=row["node_id"],
                    node_name=row["node_name"],
                    address=row["address"],
                    replica_index=int(row["replica_index"]),
                )
            )
        return self.view.pick(cfg.name)

    async def _cold(self, cfg: ModelConfig) -> Replica:
        if not getattr(self.ctx.nc, "is_connected", True):  # a load needs the bus: the handlers answer 503
            raise nats.errors.ConnectionReconnectingError()

        async def find() -> Replica | None:
            return self.view.pick(cfg.name) or await self._warm_from_db(cfg)

        return await self.cold.load(cfg, find)

    async def checkout(self, cfg: ModelConfig, chain: list[int] | None = None) -> Replica:
        """Take a slot of the model (waiting in its queue when all are taken: raises QueueFull, QueueTimeout),
        route, and count the request in flight at once (no await between the pick and the count), so eviction and
        scale-down see it from its first moment; the caller must `release` the replica."""
        self._note_slots(cfg)
        await self.queue.admit(cfg.name, current())
        try:
            replica = await self.route(cfg, chain)
        except BaseException:
            self.queue.release(cfg.name)
            raise
        self.acquire(replica)
        if chain:
            await self._observe(cfg, chain, replica)
        return replica

    def checkout_now(self, cfg: ModelConfig, caller: Caller) -> Replica | None:
        """`checkout`'s warm case, decided at once (frontend/hot_path.py): no breaker of the model's replicas
        tripped, a free slot with nobody waiting, a warm replica; the slot taken and the request counted in flight
        as `checkout` does. None: nothing taken (`checkout` waits, loads, probes)."""
        if self.view.breakers.tripped_among(self.view.replicas_of(cfg.name)):
            return None
        self._note_slots(cfg)
        if not self.queue.try_admit(cfg.name, caller):
            return None
        replica = self.view.pick(cfg.name)
        if replica is None:  # cold: `checkout` loads it
            self.queue.release(cfg.name)
            return None
        self._warm.count(cfg.name)
        self.view.touch(replica)
        self.acquire(replica)
        return replica

    def _note_slots(self, cfg: ModelConfig) -> None:
        known = self._slots.get(cfg.name)
        if known is None or known[0] is not cfg:  # a config seen first, or edited: read its slots once
            self._slots[cfg.name] = (
                cfg,
                replica_slots(getattr(cfg, "options", ()), self.queue.settings.slots),
            )

    def acquire(self, replica: Replica) -> None:
        replica.in_flight += 1
        self.active[id(replica)] = replica

    def release(self, replica: Replica) -> None:
        replica.in_flight -= 1
        if replica.in_flight == 0:
            self.active.pop(id(replica), None)
        self.queue.release(replica.model)

    def served(self, method: str, model: str, reply: object, caller: Caller | None = None) -> None:
        """A backend call's reply carrying the engine's token counts: the caller's (the current one unless named)
        fair share and usage."""
        counts = counts_of(method, reply)
        if counts is NONE:
            return
        if caller is None:
            caller = current()
        self.queue.charge(caller, model, counts)
        self.usage.record(caller, model, counts)

    def first_token(self, model: str, seconds: float) -> None:
        self.queue.first_token(model, seconds)

    async def forget(self, replica: Replica, reason: str) -> None:
        """Drop a replica that stopped serving (process died, model freed): the next route reloads."""
        log.warning(
            "dropping replica of %s on %s at %s: %s",
            replica.model,
            replica.node_name,
            replica.address,
            reason,
        )
        self.view.remove(replica)
        await self.ctx.channels.discard(replica.address)
        await replica_store.delete(
            self.ctx.pool,
            node_id=replica.node_id,
            model=replica.model,
            replica_index=replica.replica_index,
            address=replica.address,
        )
        await events.publish(
            self.ctx.nc,
            events.ReplicaEvent(
                events.REMOVED,
                replica.model,
                replica.node_id,
                replica.node_name,
                replica.replica_index,
                replica.address,
            ),
        )

    def node_left(self, node_id: str) -> None:
        """A node left `healthy` (its heartbeats stopped, or an operator's drain): no more new work for its
        replicas, and the calls in flight on them are checked. A backend that does not answer a Health probe
        has its fast lane closed, which fails those calls UNAVAILABLE (a unary call, before its first byte, is
        retried on another replica at once; a stream past its first byte ends with an error event) instead of
        waiting out the keepalive (CORRAL_BACKEND_KEEPALIVE + CORRAL_BACKEND_KEEPALIVE_TIMEOUT: 80 s by
        default) for a host that vanished without a reset."""
        busy = {r.address for r in self.view.remove_node(node_id) if r.in_flight > 0}
        for address in busy:
            task = asyncio.get_running_loop().create_task(
                self._close_if_silent(address), name=f"probe {address}"
            )
            self._probes.add(task)
            task.add_done_callback(self._probes.discard)

    async def _close_if_silent(self, address: str) -> None:
        if not await self.channels.healthy(address):
            log.warning(
                "backend at %s on a node that left healthy does not answer: failing its calls", address
            )
            self.channels.close_lane(address)

    async def close(self) -> None:
        self._stop.set()
        for task in [*self._tasks, *self._probes]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._probes, return_exceptions=True)
        await self.cold.close()
