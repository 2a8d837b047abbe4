"""The one heartbeat loop every node agent runs: the backend worker, the agent worker and a follower.

Every `interval_s` (the first beat after one interval: registration just said the node is alive) it POSTs
`body()` to the frontend's heartbeat route. A node that cannot receive work (`ready()` false: its NATS
link is down) skips the beat, so it does not claim to be alive. A beat refused with 404 (the node was
deleted) or 409 (an admin re-keyed it) calls `reregister` when the agent has one; any other refusal is
logged. A beat that raises is retried with the loop's backoff, capped at one interval.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from corral.runtime.loops import run_periodic

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 10.0  # a heartbeat interval of 0 or less (unset) means this


def interval_or_default(interval_s: float) -> float:
    return interval_s if interval_s > 0 else DEFAULT_INTERVAL_S


class HeartbeatRoute(Protocol):
    """Where beats go (`registration.FrontendClient`): (HTTP status, error message or "")."""

    async def heartbeat(self, node_id: str, body: dict[str, Any]) -> tuple[int, str]: ...


class Heartbeat:
    """One node's heartbeat: `run(stop)` until `stop` is set."""

    def __init__(
        self,
        frontend: HeartbeatRoute,
        node_id: Callable[[], str],
        body: Callable[[], Awaitable[dict[str, Any]]],
        interval_s: float,
        *,
        ready: Callable[[], bool] | None = None,
        reregister: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.frontend = frontend
        self.node_id = node_id  # read at each beat: a re-registration may change it
        self.body = body
        self.interval_s = interval_or_default(interval_s)
        self.ready = ready
        self.reregister = reregister

    async def beat(self) -> None:
        if self.ready is not None and not self.ready():
            return
        node_id = self.node_id()
        status, message = await self.frontend.heartbeat(node_id, await self.body())
        if status in (404, 409) and self.reregister is not None:
            # deleted, or re-keyed by an admin: register again (409 refusals raise)
            log.warning(
                "heartbeat of node %s refused (HTTP %d: %s); registering again", node_id, status, message
            )
            await self.reregister()
        elif status != 200:
            log.warning("heartbeat of node %s refused (HTTP %d): %s", node_id, status, message)

    async def run(self, stop: asyncio.Event) -> None:
        await run_periodic(
            "heartbeat", self.beat, self.interval_s, stop, delay_first=True, backoff_cap_s=self.interval_s
        )
