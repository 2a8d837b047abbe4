"""Exact, in-flight-safe eviction: make room for a model on a node it may use, by stopping idle replicas.

1. plan (placement/room.py): among the nodes the model's decision allows (approved, selector,
   slots, disk), the one needing the fewest stops of idle, least-recently-used replicas to fit;
   none ⇒ fail naming why, stopping nothing;
2. mark each victim unloading in PostgreSQL and announce it, so no frontend routes to it any more;
3. wait (bounded) until every live frontend acknowledged the mark and reports zero in flight for it;
4. stop exactly that process (model + replica index + address) and delete its row.
When the fit needs replicas that are busy (requests in flight, or callers queued for their model), wait
(bounded by CORRAL_EVICTION_WAIT) for them to go idle.
A model governed by a scheduling rule is never evicted below the rule's minimum (spread: one per
matching node). The replica reconciler's scale-down uses the same exact stop (`stop_replica`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg
from nats.aio.client import Client

from corral.bus import client as bus
from corral.bus import subjects
from corral.bus.messages import ModelStopReply, ModelStopRequest
from corral.config.parse import format_duration_s
from corral.config.sizes import format_size
from corral.models.aliases import resolve
from corral.placement.errors import PlacementError
from corral.placement.governance import govern
from corral.placement.pipeline import Decision
from corral.placement.replica_plan import replica_floor
from corral.placement.room import RoomPlan, loaded_counts, plan_room, room_shortfall
from corral.placement.snapshot import NodeSnapshot, ReplicaSnapshot
from corral.routing import events
from corral.routing.inflight import ClusterInFlight
from corral.routing.replica import replica_key
from corral.store import placement as placement_store
from corral.store import replicas as replica_store
from corral.store import scheduling as scheduling_store
from corral.telemetry.families import ROUTING_DECISIONS

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 30.0
POLL_S = 0.1
STOP_TIMEOUT_S = 10.0


class EvictionBusy(PlacementError):
    """Every replica stayed busy for the whole eviction wait; raise CORRAL_EVICTION_WAIT or add nodes."""


@dataclass(frozen=True)
class _Candidate:
    node: NodeSnapshot
    replica: ReplicaSnapshot

    @property
    def key(self) -> str:
        return replica_key(self.node.id, self.replica.model, self.replica.replica_index)


class Evictor:
    def __init__(
        self,
        pool: asyncpg.Pool,
        nc: Client,
        inflight: ClusterInFlight,
        local_in_flight: Callable[[str], int],
        *,
        wait_s: float,
        aliases: Mapping[str, str] | None = None,
    ) -> None:
        self.pool, self.nc, self.inflight = pool, nc, inflight
        self._local_in_flight = local_in_flight
        self.wait_s = wait_s
        self.aliases: Mapping[str, str] = aliases if aliases is not None else {}
        # requests queued for a model across the cluster (replicas/load_reports.py, set once it exists): a
        # replica whose model has callers waiting is not idle, whatever it has in flight this instant
        self.waiting: Callable[[str], int] = lambda _model: 0

    def in_flight(self, key: str) -> int:
        """Requests in flight on a replica, on this frontend and every live peer."""
        return self._local_in_flight(key) + self.inflight.remote_total(key)

    def _busy(self, key: str) -> bool:
        return self.in_flight(key) > 0

    async def _floors(self, nodes: list[NodeSnapshot]) -> dict[str, int]:
        """Loaded replicas each rule-governed model keeps whatever else needs room."""
        rules = await scheduling_store.all_rules(self.pool)
        governance = govern(rules, lambda name: resolve(name, None, self.aliases))
        floors: dict[str, int] = {}
        for rule in rules:
            g = governance[rule.model_name]
            if g.governs and g.target is not None and rule.autoscaling:
                floors[g.target] = replica_floor(rule, nodes, time.time())  # schedules raise it
        return floors

    async def stop_replica(self, node: NodeSnapshot, replica: ReplicaSnapshot, why: str) -> bool:
        """The exact, in-flight-safe stop of one replica (scale-down); False when it stayed busy or changed."""
        return await self._evict(_Candidate(node, replica), why)

    async def make_room(self, decision: Decision) -> NodeSnapshot:
        """Free one node the decision allows until the model fits there; that node (loading.context.Evictor)."""
        req = decision.request
        allowed_ids = [n.id for n in decision.ranked]
        rejected = {name: r.reason for name, r in decision.rejections.items()}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        while True:
            nodes = await placement_store.snapshot(self.pool)
            by_id = {n.id: n for n in nodes}
            allowed = [by_id[i] for i in allowed_ids if i in by_id]
            loaded, floors = loaded_counts(nodes), await self._floors(nodes)
            plan = plan_room(req, allowed, loaded, floors, self._idle, self._recency)
            if plan is not None and await self._evict_all(plan):
                return plan.node
            # a victim got busy or changed meanwhile (plan again), or the fit needs busy replicas (wait)
            if (
                plan is None
                and plan_room(req, allowed, loaded, floors, lambda _n, _r: True, self._recency) is None
            ):
                raise PlacementError(room_shortfall(req, allowed, loaded, floors, rejected))
            if loop.time() >= deadline:
                raise EvictionBusy(
                    f"scheduling {req.model}: no healthy nodes available: all models busy, cannot evict (waited "
                    f"{format_duration_s(self.wait_s)} for a replica to go idle; raise CORRAL_EVICTION_WAIT "
                    "or add nodes)"
                )
            await asyncio.sleep(0.25)

    def _idle(self, node: NodeSnapshot, replica: ReplicaSnapshot) -> bool:
        if self.waiting(replica.model) > 0:
            return False
        return not self._busy(replica_key(node.id, replica.model, replica.replica_index))

    def _recency(self, node: NodeSnapshot, replica: ReplicaSnapshot) -> float:
        key = replica_key(node.id, replica.model, replica.replica_index)
        return max(replica.last_used_s, self.inflight.last_used_s(key))

    async def _evict_all(self, plan: RoomPlan) -> bool:
        for victim in plan.victims:
            why = f"to make room for another model ({format_size(plan.freed_bytes)} of VRAM freed in all)"
            if not await self._evict(_Candidate(plan.node, victim), why):
                return False
        return True

    async def _evict(self, c: _Candidate, why: str = "to make room") -> bool:
        r, node = c.replica, c.node
        row: dict[str, Any] = dict(
            node_id=node.id, model=r.model, replica_index=r.replica_index, address=r.address
        )
        if not await replica_store.mark_unloading(self.pool, **row):
            return False
        mark = uuid.uuid4().hex
        await events.publish(
            self.nc,
            events.ReplicaEvent(
                events.UNLOADING, r.model, node.id, node.name, r.replica_index, r.address, mark
            ),
        )
        if not await self._drained(c.key, mark):
            log.info(
                "eviction of %s on %s abandoned: still busy after %s",
                c.key,
                node.name,
                format_duration_s(DRAIN_TIMEOUT_S),
            )
            await replica_store.unmark_unloading(self.pool, **row)
            await events.publish(
                self.nc,
                events.ReplicaEvent(events.LOADED, r.model, node.id, node.name, r.replica_index, r.address),
            )
            return False
        await self._stop_exact(node, r)
        await replica_store.delete(self.pool, **row)
        await placement_store.credit_vram(self.pool, node.id, r.vram_bytes)
        await events.publish(
            self.nc,
            events.ReplicaEvent(events.REMOVED, r.model, node.id, node.name, r.replica_index, r.address),
        )
        ROUTING_DECISIONS.labels(r.model, "evict").inc()
        log.info("evicted %s (replica %d) from node %s %s", r.model, r.replica_index, node.name, why)
        return True

    async def _drained(self, key: str, mark: str) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DRAIN_TIMEOUT_S
        await asyncio.sleep(self.inflight.interval_s * 1.5)  # let every peer apply the mark and report
        while loop.time() < deadline:
            if self.inflight.all_acked(mark) and not self._busy(key):
                return True
            await asyncio.sleep(POLL_S)
        return False

    async def _stop_exact(self, node: NodeSnapshot, r: ReplicaSnapshot) -> None:
        request = ModelStopRequest(
            model_name=r.model,
            process_key=f"{r.model}#{r.replica_index}",
            expected_address=r.address,
            force=False,
        )
        try:
            reply = await bus.request(
                self.nc,
                subjects.model_stop(node.id),
                request,
                ModelStopReply,
                STOP_TIMEOUT_S,
                "the worker's NATS link",
            )
        except bus.BusError as exc:
            log.warning("exact stop of %s#%d on %s failed: %s", r.model, r.replica_index, node.name, exc)
            return
        if reply.error:
            log.warning("exact stop of %s#%d on %s: %s", r.model, r.replica_index, node.name, reply.error)
