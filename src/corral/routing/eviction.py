"""Exact, in-flight-safe eviction: free a node by stopping the least-recently-used idle replica.

1. pick the LRU loaded replica (cluster-wide) with zero requests in flight on every frontend;
2. mark it unloading in PostgreSQL and announce it, so no frontend routes to it any more;
3. wait (bounded) until every live frontend acknowledged the mark and reports zero in flight for it;
4. stop exactly that process (model + replica index + address) and delete its row.
When every replica is busy, wait (bounded by CORRAL_EVICTION_WAIT) for one to go idle.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import asyncpg
from nats.aio.client import Client

from corral.bus import client as bus
from corral.bus import subjects
from corral.bus.messages import ModelStopReply, ModelStopRequest
from corral.config.parse import format_duration_s
from corral.placement.errors import PlacementError
from corral.placement.pipeline import Decision
from corral.placement.snapshot import NodeSnapshot, ReplicaSnapshot
from corral.routing import events
from corral.routing.inflight import ClusterInFlight
from corral.routing.replica import Replica, replica_key
from corral.store import placement as placement_store
from corral.store import replicas as replica_store

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
    def __init__(self, pool: asyncpg.Pool, nc: Client, inflight: ClusterInFlight,
                 local_in_flight: Callable[[str], int], *, wait_s: float) -> None:
        self.pool, self.nc, self.inflight = pool, nc, inflight
        self._local_in_flight = local_in_flight
        self.wait_s = wait_s

    def _busy(self, key: str) -> bool:
        return self._local_in_flight(key) + self.inflight.remote_total(key) > 0

    def _candidates(self, nodes: list[NodeSnapshot], model: str) -> list[_Candidate]:
        found = [_Candidate(n, r) for n in nodes for r in n.replicas if r.state == "loaded" and r.model != model]
        return sorted(found, key=lambda c: max(c.replica.last_used_s, self.inflight.last_used_s(c.key)))

    async def evict_for(self, model: str, decision: Decision) -> bool:
        """Free room for `model`; True when a replica was stopped."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        while True:
            nodes = await placement_store.snapshot(self.pool)
            candidates = self._candidates(nodes, model)
            if not candidates:
                return False
            for candidate in candidates:
                if not self._busy(candidate.key) and await self._evict(candidate):
                    return True
            if loop.time() >= deadline:
                raise EvictionBusy(
                    f"scheduling {model}: no healthy nodes available: all models busy, cannot evict (waited "
                    f"{format_duration_s(self.wait_s)} for a replica to go idle; raise CORRAL_EVICTION_WAIT "
                    "or add nodes)"
                )
            await asyncio.sleep(0.25)

    async def _evict(self, c: _Candidate) -> bool:
        r, node = c.replica, c.node
        row = dict(node_id=node.id, model=r.model, replica_index=r.replica_index, address=r.address)
        if not await replica_store.mark_unloading(self.pool, **row):
            return False
        mark = uuid.uuid4().hex
        await events.publish(self.nc, events.ReplicaEvent(events.UNLOADING, r.model, node.id, node.name,
                                                          r.replica_index, r.address, mark))
        if not await self._drained(c.key, mark):
            log.info("eviction of %s on %s abandoned: still busy after %s", c.key, node.name,
                     format_duration_s(DRAIN_TIMEOUT_S))
            await replica_store.unmark_unloading(self.pool, **row)
            await events.publish(self.nc, events.ReplicaEvent(events.LOADED, r.model, node.id, node.name,
                                                              r.replica_index, r.address))
            return False
        await self._stop_exact(node, r)
        await replica_store.delete(self.pool, **row)
        await events.publish(self.nc, events.ReplicaEvent(events.REMOVED, r.model, node.id, node.name,
                                                          r.replica_index, r.address))
        log.info("evicted %s (replica %d) from node %s to make room", r.model, r.replica_index, node.name)
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
        request = ModelStopRequest(model_name=r.model, process_key=f"{r.model}#{r.replica_index}",
                                   expected_address=r.address, force=False)
        try:
            reply = await bus.request(self.nc, subjects.model_stop(node.id), request, ModelStopReply,
                                      STOP_TIMEOUT_S, "the worker's NATS link")
        except bus.BusError as exc:
            log.warning("exact stop of %s#%d on %s failed: %s", r.model, r.replica_index, node.name, exc)
            return
        if reply.error:
            log.warning("exact stop of %s#%d on %s: %s", r.model, r.replica_index, node.name, reply.error)


def local_in_flight_lookup(replicas: Callable[[], list[Replica]]) -> Callable[[str], int]:
    def lookup(key: str) -> int:
        return sum(r.in_flight for r in replicas() if r.key == key)

    return lookup
