"""Reclaim replica rows stuck in staging/loading whose load job stopped driving them.

Liveness is the job's heartbeat, never elapsed time: a slow transfer that still heartbeats is
never touched. Each reclaimed row is logged and its backend process is stopped exactly.
"""

from __future__ import annotations

import asyncio
import logging

import asyncpg
from nats.aio.client import Client

from corral.bus import subjects
from corral.bus.messages import BackendStopRequest
from corral.runtime.loops import run_periodic
from corral.store import replicas as replica_store

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 15.0


async def sweep_once(pool: asyncpg.Pool, nc: Client, orphan_s: float) -> int:
    rows = await replica_store.reclaim_stuck(pool, orphan_s)
    for row in rows:
        key = f"{row['model_name']}#{row['replica_index']}"
        log.warning(
            "reclaimed replica row %s on node %s at %s: stuck in %s with no live load job",
            key,
            row["node_id"],
            row["address"],
            row["state"],
        )
        await nc.publish(
            subjects.backend_stop(row["node_id"]), BackendStopRequest(backend=key, force=True).to_json()
        )
    return len(rows)


async def run(
    pool: asyncpg.Pool, nc: Client, orphan_s: float, stop: asyncio.Event, interval_s: float = SWEEP_INTERVAL_S
) -> None:
    await run_periodic("stuck replica sweep", lambda: sweep_once(pool, nc, orphan_s), interval_s, stop)
