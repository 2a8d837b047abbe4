"""Stop replicas quarantined as `unloading` with an acknowledged exact stop; retry with durable backoff.

Rows are claimed one at a time (`FOR UPDATE SKIP LOCKED`, 2-minute lease), so any number of
frontends can run this loop. A replica with requests still in flight anywhere is left for a moment.
"""

from __future__ import annotations

import asyncio
import logging

import asyncpg
from nats.aio.client import Client

from corral.bus import client as bus
from corral.bus import subjects
from corral.bus.messages import ModelStopReply, ModelStopRequest
from corral.routing.replica import replica_key
from corral.routing.router import Router
from corral.runtime.loops import run_periodic
from corral.store import revisions

log = logging.getLogger(__name__)

TICK_S = 5.0  # edits kick the loop at once; the tick only paces retries
STOP_TIMEOUT_S = 10.0
BUSY_RECHECK_S = 1.0


class RevisionCleanup:
    def __init__(self, pool: asyncpg.Pool, nc: Client, router: Router) -> None:
        self.pool, self.nc, self.router = pool, nc, router
        self._wake = asyncio.Event()

    async def kick(self) -> None:
        self._wake.set()

    async def once(self) -> bool:
        """Handle one due row; False when there was none."""
        row = await revisions.claim_cleanup(self.pool)
        if row is None:
            return False
        key = replica_key(row["node_id"], row["model_name"], int(row["replica_index"]))
        local = sum(r.in_flight for r in self.router._local_replicas() if r.key == key)
        if local + self.router.inflight.remote_total(key) > 0:
            await revisions.cleanup_later(self.pool, row["id"], BUSY_RECHECK_S)
            return True
        process_key = f"{row['model_name']}#{row['replica_index']}"
        request = ModelStopRequest(
            model_name=row["model_name"], process_key=process_key, expected_address=row["address"]
        )
        try:
            reply = await bus.request(
                self.nc,
                subjects.model_stop(row["node_id"]),
                request,
                ModelStopReply,
                STOP_TIMEOUT_S,
                "the worker's NATS link",
            )
        except bus.BusError as exc:
            await revisions.cleanup_failed(self.pool, row["id"], f"exact stop of {process_key}: {exc}")
            return True
        if reply.terminated:
            await revisions.cleanup_done(self.pool, row["id"])
            log.info("stopped %s at %s (old revision)", process_key, row["address"])
        else:
            await revisions.cleanup_failed(
                self.pool, row["id"], reply.error or "worker did not stop the process"
            )
        return True

    async def run(self, stop: asyncio.Event) -> None:
        await run_periodic("revision cleanup", self.drain, TICK_S, stop, wake=self._wake)

    async def drain(self) -> None:
        """Handle every due row."""
        while await self.once():
            pass
