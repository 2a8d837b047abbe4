"""Heartbeat timestamps held in memory instead of written, shared by every frontend over NATS.

A frontend that holds a beat publishes `{node_id, at}` on `state.heartbeats.held`; every
frontend keeps the newest timestamp per node from all of them, so the health monitor (on
whichever frontend leads) sees beats that reached any frontend. A frontend that starts asks
its peers for their table (`state.heartbeats.snapshot`), so a restart loses nothing while
one peer is up. With no peer at all, nothing is lost either: the first beat of every node
after a frontend starts is written durably, and the monitor grants each node one stale
threshold from its own start before judging it.
"""

from __future__ import annotations

import json
import logging
import time

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError, TimeoutError

log = logging.getLogger(__name__)

HELD_SUBJECT = "state.heartbeats.held"
SNAPSHOT_SUBJECT = "state.heartbeats.snapshot"
SNAPSHOT_TIMEOUT_S = 1.0


class HeldBeats:
    def __init__(self, nc: Client | None = None) -> None:
        self.nc = nc
        self.latest_s: dict[str, float] = {}
        self.published = 0

    def note(self, node_id: str, at_s: float) -> None:
        if at_s > self.latest_s.get(node_id, 0.0):
            self.latest_s[node_id] = at_s

    async def hold(self, node_id: str, at_s: float) -> None:
        """Record a beat that was not written, here and on every peer."""
        self.note(node_id, at_s)
        if self.nc is not None and self.nc.is_connected:
            await self.nc.publish(HELD_SUBJECT, json.dumps({"node_id": node_id, "at": at_s}).encode())
            self.published += 1

    def forget(self, node_id: str) -> None:
        self.latest_s.pop(node_id, None)

    def prune(self, older_than_s: float) -> None:
        cutoff = time.time() - older_than_s
        for node_id in [n for n, at in self.latest_s.items() if at < cutoff]:
            del self.latest_s[node_id]

    async def start(self) -> None:
        if self.nc is None:
            return

        async def on_held(msg: Msg) -> None:
            try:
                body = json.loads(msg.data)
                self.note(str(body["node_id"]), float(body["at"]))
            except (ValueError, KeyError, TypeError):
                log.warning("ignoring malformed held heartbeat")

        async def on_snapshot(msg: Msg) -> None:
            if msg.reply:
                await msg.respond(json.dumps(self.latest_s).encode())

        await self.nc.subscribe(HELD_SUBJECT, cb=on_held)
        await self.nc.flush(timeout=5)
        await self._load_snapshot(self.nc)  # before answering snapshots ourselves: our own table is empty
        await self.nc.subscribe(SNAPSHOT_SUBJECT, cb=on_snapshot)

    async def _load_snapshot(self, nc: Client) -> None:
        try:
            reply = await nc.request(SNAPSHOT_SUBJECT, b"{}", timeout=SNAPSHOT_TIMEOUT_S)
        except (NoRespondersError, TimeoutError):
            return
        try:
            for node_id, at_s in json.loads(reply.data).items():
                self.note(node_id, float(at_s))
        except (ValueError, AttributeError, TypeError):
            log.warning("ignoring malformed held-heartbeat snapshot")
