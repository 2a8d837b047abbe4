"""Route a request to a replica: warm (in-memory view, then PostgreSQL) or cold (load it).

Within one frontend, concurrent requests for an unloaded model share one load task; the
task is shielded so a client disconnect never cancels a load. Cross-frontend load jobs
with waiters and progress replace `_cold` in the load-job issue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from corral.loading.cold_load import LoadContext, cold_load
from corral.models.config import ModelConfig
from corral.routing.replica import Replica, ReplicaView
from corral.store import replicas as replica_store

log = logging.getLogger(__name__)


class Router:
    def __init__(self, ctx: LoadContext) -> None:
        self.ctx = ctx
        self.view = ReplicaView()
        self._loads: dict[str, asyncio.Task[Replica]] = {}

    async def route(self, cfg: ModelConfig) -> Replica:
        replica = self.view.pick(cfg.name)
        if replica is not None:
            return replica
        rows = await replica_store.routable(self.ctx.pool, cfg.name)
        if rows:
            for row in rows:
                self.view.add(Replica(model=cfg.name, node_id=row["node_id"], node_name=row["node_name"],
                                      address=row["address"], replica_index=int(row["replica_index"])))
            picked = self.view.pick(cfg.name)
            if picked is not None:
                return picked
        return await self._cold(cfg)

    async def _cold(self, cfg: ModelConfig) -> Replica:
        task = self._loads.get(cfg.name)
        if task is None:
            task = asyncio.create_task(cold_load(self.ctx, cfg), name=f"load:{cfg.name}")
            self._loads[cfg.name] = task
            task.add_done_callback(lambda _t: self._loads.pop(cfg.name, None))
        replica = await asyncio.shield(task)
        return self.view.add(replica)

    @contextlib.asynccontextmanager
    async def using(self, replica: Replica) -> AsyncIterator[Replica]:
        replica.in_flight += 1
        try:
            yield replica
        finally:
            replica.in_flight -= 1

    async def forget(self, replica: Replica, reason: str) -> None:
        """Drop a replica that stopped serving (process died, model freed): the next route reloads."""
        log.warning("dropping replica of %s on %s at %s: %s", replica.model, replica.node_name,
                    replica.address, reason)
        self.view.remove(replica)
        await self.ctx.channels.discard(replica.address)
        await replica_store.delete(self.ctx.pool, node_id=replica.node_id, model=replica.model,
                                   replica_index=replica.replica_index, address=replica.address)

    async def close(self) -> None:
        for task in list(self._loads.values()):
            task.cancel()
        await self.ctx.channels.close()
