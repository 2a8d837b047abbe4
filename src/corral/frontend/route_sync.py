"""Keeps this frontend's model routes (models/routes.py `RouteTable`) equal to PostgreSQL's.

PostgreSQL is the source of truth; an edit on any frontend publishes `state.routes.changed` and every
frontend re-reads the table at once. A missed event costs at most ROUTES_REFRESH_S: the table is also
re-read on that period. The request path only reads the in-memory table (no statement per request).
"""

from __future__ import annotations

import asyncio
import json
import logging

import asyncpg
from nats.aio.client import Client
from nats.aio.msg import Msg

from corral.models.routes import RouteTable
from corral.runtime.loops import run_periodic
from corral.store import routes as routes_store

log = logging.getLogger(__name__)

ROUTES_CHANGED_SUBJECT = "state.routes.changed"
ROUTES_REFRESH_S = 15.0  # the longest a frontend that missed an edit's event serves the old routes


async def publish_routes_changed(nc: Client | None, name: str) -> None:
    if nc is None or not nc.is_connected:
        return
    await nc.publish(ROUTES_CHANGED_SUBJECT, json.dumps({"name": name}).encode())


class RouteSync:
    """Loads the routes at start, then re-reads them on each edit's event and every ROUTES_REFRESH_S."""

    def __init__(
        self, pool: asyncpg.Pool, nc: Client, table: RouteTable, refresh_s: float = ROUTES_REFRESH_S
    ) -> None:
        self.pool, self.nc, self.table, self.refresh_s = pool, nc, table, refresh_s
        self.wake = asyncio.Event()

    async def reload(self) -> None:
        self.table.replace(await routes_store.all_routes(self.pool))

    async def start(self) -> None:
        async def on_changed(_msg: Msg) -> None:
            self.wake.set()

        await self.reload()
        await self.nc.subscribe(ROUTES_CHANGED_SUBJECT, cb=on_changed)

    async def run(self, stop: asyncio.Event) -> None:
        await run_periodic(
            "model routes refresh", self.reload, self.refresh_s, stop, wake=self.wake, delay_first=True
        )
