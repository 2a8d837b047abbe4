"""The frontend's heartbeat checkpointer: write a beat durably only when the rules say so.

Held beats go to `HeldBeats` (shared with the other frontends over NATS). What this frontend
last wrote per node is kept in memory; a node event (status change, deletion) drops the
entry so the node's next beat is written and its status read back.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

import asyncpg

from corral.nodes.heartbeat_rules import Beat, Written, merge, write_reason
from corral.nodes.held_beats import HeldBeats
from corral.store import nodes as node_store
from corral.telemetry.families import HEARTBEAT_WRITES

log = logging.getLogger(__name__)


class HeartbeatCheckpointer:
    def __init__(
        self, pool: asyncpg.Pool, held: HeldBeats, checkpoint_s: float, clock: Callable[[], float] = time.time
    ) -> None:
        self.pool, self.held, self.checkpoint_s, self._clock = pool, held, checkpoint_s, clock
        self._written: dict[str, Written] = {}
        self.durable_writes = 0
        self.held_beats = 0

    async def beat(self, node_id: str, beat: Beat) -> bool:
        """Record one heartbeat; False when the node is unknown (the worker must register again)."""
        now_s = self._clock()
        written = self._written.get(node_id)
        reason = write_reason(written, beat, now_s, self.checkpoint_s)
        if reason is None:
            self.held_beats += 1
            await self.held.hold(node_id, now_s)
            return True
        row = await node_store.heartbeat(self.pool, node_id, dataclasses.asdict(beat))
        if row is None:
            self._written.pop(node_id, None)
            return False
        self.durable_writes += 1
        HEARTBEAT_WRITES.inc()
        self._written[node_id] = Written(
            now_s, row["status"], merge(written.figures if written else None, beat)
        )
        log.debug("heartbeat of %s written: %s", node_id, reason)
        return True

    def forget(self, node_id: str) -> None:
        self._written.pop(node_id, None)

    def on_node_event(self, node_id: str, _status: str) -> None:
        self.forget(node_id)
