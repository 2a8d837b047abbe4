"""Health monitor: one frontend at a time (advisory lock 104) turns stale nodes offline and
brings back nodes that beat again — to healthy if approved, to pending if never approved — and
deletes never-approved nodes not heard of for `pending_expiry_s` (CORRAL_PENDING_NODE_EXPIRY)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import asyncpg

from corral.nodes.held_beats import HeldBeats
from corral.nodes.status import next_status
from corral.runtime.loops import run_periodic
from corral.store import nodes as node_store
from corral.store.locks import KEY_HEALTH_CHECK
from corral.store.queries import q

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StatusChange:
    node_id: str
    name: str
    old: str
    new: str


class HealthMonitor:
    def __init__(
        self,
        pool: asyncpg.Pool,
        held: HeldBeats,
        *,
        stale_threshold_s: float,
        interval_s: float,
        on_change: Callable[[StatusChange], object] | None = None,
        clock: Callable[[], float] = time.time,
        pending_expiry_s: float = 3600.0,
    ) -> None:
        self.pool, self.held = pool, held
        self.stale_threshold_s, self.interval_s = stale_threshold_s, interval_s
        self.pending_expiry_s = pending_expiry_s
        self.on_change, self._clock = on_change, clock
        self.watching_since_s = clock()

    async def run(self, stop: asyncio.Event) -> None:
        await run_periodic("health monitor", self.pass_once, self.interval_s, stop)

    async def pass_once(self) -> None:
        for change in await self.check_once():
            if self.on_change is not None:
                result = self.on_change(change)
                if asyncio.iscoroutine(result):
                    await result
        self.held.prune(older_than_s=2 * self.stale_threshold_s)

    async def check_once(self) -> list[StatusChange]:
        """One pass, if this frontend wins the lock; another frontend's pass makes this a no-op."""
        async with self.pool.acquire() as conn:
            if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", KEY_HEALTH_CHECK):
                return []
            try:
                changes = []
                for row in await conn.fetch(q("nodes_for_health")):
                    change = await self._expire(conn, row) if not row["approved"] else None
                    change = change or await self._judge(row)
                    if change is not None:
                        changes.append(change)
                return changes
            finally:
                await conn.execute("SELECT pg_advisory_unlock($1)", KEY_HEALTH_CHECK)

    def _last_beat_s(self, row: asyncpg.Record) -> float:
        """The freshest beat known anywhere: durable, or held by any frontend."""
        durable_s = row["last_heartbeat"].timestamp() if row["last_heartbeat"] else 0.0
        return max(durable_s, self.held.latest_s.get(row["id"], 0.0))

    async def _expire(self, conn: asyncpg.Connection, row: asyncpg.Record) -> StatusChange | None:
        """A never-approved node silent for `pending_expiry_s` (since this monitor could see beats) is deleted;
        a worker still running registers again (its heartbeat gets 404)."""
        silent_s = self._clock() - max(self._last_beat_s(row), self.watching_since_s)
        if silent_s <= self.pending_expiry_s:
            return None
        gone = await node_store.expire_pending(conn, row["id"], self.pending_expiry_s)
        if gone is None:
            return None  # it registered again meanwhile
        log.warning(
            "node %s (%s) never approved and silent for %.0fs: deleted (CORRAL_PENDING_NODE_EXPIRY %.0fs)",
            row["name"],
            row["id"],
            silent_s,
            self.pending_expiry_s,
        )
        return StatusChange(row["id"], row["name"], row["status"], "deleted")

    async def _judge(self, row: asyncpg.Record) -> StatusChange | None:
        last_beat_s = self._last_beat_s(row)
        new = next_status(
            row["status"],
            approved=row["approved"],
            last_beat_s=last_beat_s,
            status_changed_s=row["status_changed_at"].timestamp(),
            now_s=self._clock(),
            stale_threshold_s=self.stale_threshold_s,
            watching_since_s=self.watching_since_s,
            admin_drained=row["drained_by"] == node_store.ADMIN,
        )
        if new is None or new == row["status"]:
            return None
        dropped = new == node_store.OFFLINE
        if not await node_store.swap_status(self.pool, row["id"], row["status"], new, drop_replicas=dropped):
            return None  # it re-registered or was drained meanwhile; the next pass looks again
        age_s = self._clock() - last_beat_s
        log.warning(
            "node %s (%s): %s -> %s (last heartbeat %.0fs ago, stale threshold %.0fs; "
            "LOCALAI_STALE_NODE_THRESHOLD)",
            row["name"],
            row["id"],
            row["status"],
            new,
            age_s,
            self.stale_threshold_s,
        )
        return StatusChange(row["id"], row["name"], row["status"], new)
