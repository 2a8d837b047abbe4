"""Route a request to a replica: warm (in-memory view, then PostgreSQL) or cold (a durable load job).

Cold path, per request, up to 3 rounds: register as a waiter, claim the model's load job (one
statement); the claimer starts the job in the background; everyone waits for its outcome
(NATS event, polling fallback) within LOCALAI_MODEL_LOAD_WAIT, then re-runs the warm path.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid

from corral.loading.cold_load import LoadContext
from corral.loading.errors import LoadError, ModelStillLoading
from corral.loading.runner import JobSettings, LoadJobRunner
from corral.loading.status import loading_message, loading_object, retry_after_s
from corral.loading.waiters import Waiters
from corral.models.config import ModelConfig
from corral.placement.errors import PlacementError
from corral.routing import events
from corral.routing.eviction import Evictor, local_in_flight_lookup
from corral.routing.inflight import ClusterInFlight
from corral.routing.replica import Replica, ReplicaView, replica_key
from corral.store import load_jobs
from corral.store import replicas as replica_store

log = logging.getLogger(__name__)

MAX_ROUNDS = 3
VIEW_REFRESH_S = 10.0
STATUS_READ_TIMEOUT_S = 5.0


def _raise_failure(key: str, error: str, kind: str) -> None:
    if kind == "placement":
        raise PlacementError(error)
    raise LoadError(error or f"loading model {key} failed")


class Router:
    def __init__(self, ctx: LoadContext, *, wait_budget_s: float, stall_s: float, orphan_s: float,
                 eviction_wait_s: float = 30.0) -> None:
        frontend_id = str(uuid.uuid4())
        self.active: dict[int, Replica] = {}  # replicas with requests in flight here (even if evicted)
        self.inflight = ClusterInFlight(ctx.nc, frontend_id, self._local_replicas)
        self.view = ReplicaView(self.inflight.total)
        evictor = Evictor(ctx.pool, ctx.nc, self.inflight, local_in_flight_lookup(self._local_replicas),
                          wait_s=eviction_wait_s, aliases=ctx.aliases)
        self.ctx = dataclasses.replace(ctx, evictor=evictor)
        self.wait_budget_s = wait_budget_s
        self.jobs = JobSettings(owner=frontend_id, stall_s=stall_s, orphan_s=orphan_s)
        self.waiters = Waiters(ctx.pool, ctx.nc, orphan_s=orphan_s)
        self.runner = LoadJobRunner(self.ctx, self.jobs, self.waiters, self._loaded)
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def _local_replicas(self) -> list[Replica]:
        seen = {id(r): r for r in self.view.all()}
        seen.update(self.active)
        return list(seen.values())

    async def start(self) -> None:
        await self.waiters.start()
        await self.inflight.start()
        await events.subscribe(self.ctx.nc, self._on_event)
        await self.refresh()
        self._tasks = [asyncio.create_task(self.inflight.run(self._stop), name="inflight-reports"),
                       asyncio.create_task(self._refresh_loop(), name="replica-view-refresh")]

    async def refresh(self) -> None:
        """Re-read every routable replica: a missed event heals within one refresh interval."""
        rows = await replica_store.all_routable(self.ctx.pool)
        self.view.replace_all(Replica(model=r["model_name"], node_id=r["node_id"], node_name=r["node_name"],
                                      address=r["address"], replica_index=int(r["replica_index"])) for r in rows)

    async def _refresh_loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), VIEW_REFRESH_S)
            if not self._stop.is_set():
                try:
                    await self.refresh()
                except Exception as exc:  # the next refresh retries
                    log.warning("replica view refresh failed: %s", exc)

    async def _on_event(self, event: events.ReplicaEvent) -> None:
        key = replica_key(event.node_id, event.model, event.replica_index)
        if event.op == events.LOADED:
            self.view.add(Replica(model=event.model, node_id=event.node_id, node_name=event.node_name,
                                  address=event.address, replica_index=event.replica_index))
        else:
            self.view.remove_key(event.model, key)
        if event.mark:
            self.inflight.acks.add(event.mark)

    async def _loaded(self, replica: Replica) -> None:
        self.view.add(replica)
        await events.publish(self.ctx.nc, events.ReplicaEvent(
            events.LOADED, replica.model, replica.node_id, replica.node_name, replica.replica_index,
            replica.address))

    async def route(self, cfg: ModelConfig) -> Replica:
        """Warm path: memory only. Cold path: a durable load job."""
        replica = self.view.pick(cfg.name)
        if replica is None:
            replica = await self._cold(cfg)
        self.view.touch(replica)
        return replica

    async def _warm_from_db(self, cfg: ModelConfig) -> Replica | None:
        for row in await replica_store.routable(self.ctx.pool, cfg.name):
            self.view.add(Replica(model=cfg.name, node_id=row["node_id"], node_name=row["node_name"],
                                  address=row["address"], replica_index=int(row["replica_index"])))
        return self.view.pick(cfg.name)

    async def _cold(self, cfg: ModelConfig) -> Replica:
        key = cfg.name
        loop = asyncio.get_running_loop()
        deadline = None if self.wait_budget_s <= 0 else loop.time() + self.wait_budget_s
        for _round in range(MAX_ROUNDS):
            with self.waiters.register(key) as woken:
                claimed, job = await load_jobs.claim(self.ctx.pool, key, self.jobs.owner,
                                                     orphan_s=self.jobs.orphan_s,
                                                     failed_grace_s=self.jobs.failed_grace_s)
                if claimed:
                    replica = await self._warm_from_db(cfg)  # it may have loaded meanwhile
                    if replica is not None:
                        await load_jobs.delete(self.ctx.pool, key, self.jobs.owner)
                        return replica
                    self.runner.start(cfg)
                elif job is not None and job.state == "failed":
                    _raise_failure(key, job.last_error, job.error_kind)
                remaining = None if deadline is None else max(0.0, deadline - loop.time())
                outcome = await self.waiters.wait(woken, key, remaining)
            if outcome is None:
                await self._still_loading(key)
            elif not outcome.ok and not outcome.orphaned:
                _raise_failure(key, outcome.error, outcome.kind)
            replica = self.view.pick(key) or await self._warm_from_db(cfg)
            if replica is not None:
                return replica
        raise LoadError(f"loading model {key}: the load finished but the model is not available on any node")

    async def _still_loading(self, key: str) -> None:
        try:
            job = await asyncio.wait_for(load_jobs.get(self.ctx.pool, key), STATUS_READ_TIMEOUT_S)
        except TimeoutError:
            job = None
        if job is None:
            raise LoadError(f"timed out waiting for model {key} to load after {self.wait_budget_s:g}s "
                            "(LOCALAI_MODEL_LOAD_WAIT)")
        message = loading_message(job)
        raise ModelStillLoading(message, loading_object(job), retry_after_s(job, self.wait_budget_s))

    async def checkout(self, cfg: ModelConfig) -> Replica:
        """Route and count the request in flight at once (no await between the pick and the count), so
        eviction and scale-down see it from its first moment; the caller must `release` the replica."""
        replica = await self.route(cfg)
        self.acquire(replica)
        return replica

    def acquire(self, replica: Replica) -> None:
        replica.in_flight += 1
        self.active[id(replica)] = replica

    def release(self, replica: Replica) -> None:
        replica.in_flight -= 1
        if replica.in_flight == 0:
            self.active.pop(id(replica), None)

    async def forget(self, replica: Replica, reason: str) -> None:
        """Drop a replica that stopped serving (process died, model freed): the next route reloads."""
        log.warning("dropping replica of %s on %s at %s: %s", replica.model, replica.node_name,
                    replica.address, reason)
        self.view.remove(replica)
        await self.ctx.channels.discard(replica.address)
        await replica_store.delete(self.ctx.pool, node_id=replica.node_id, model=replica.model,
                                   replica_index=replica.replica_index, address=replica.address)
        await events.publish(self.ctx.nc, events.ReplicaEvent(
            events.REMOVED, replica.model, replica.node_id, replica.node_name, replica.replica_index,
            replica.address))

    async def close(self) -> None:
        self._stop.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.runner.close()
        await self.ctx.channels.close()
