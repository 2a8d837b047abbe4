"""The frontend's node-lifecycle parts, built once at start: heartbeat checkpointer, shared held
beats, node events, health monitor, xmin-age sampler and the NATS credential minter.

`run()` owns the background loops as named tasks; `stop()` ends them with a bound.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from nats.aio.client import Client

from corral.bus import natsauth
from corral.config.errors import ConfigError
from corral.nodes.events import NodeEvents, NodeListener, publish_node_event
from corral.nodes.health_monitor import HealthMonitor, StatusChange
from corral.nodes.heartbeats import HeartbeatCheckpointer
from corral.nodes.held_beats import HeldBeats
from corral.store.xmin_gauge import XminAgeSampler, register_gauge

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 5.0


@dataclass
class Minter:
    """Mints scoped worker NATS credentials when an account seed is configured."""

    account: natsauth.KeyPair
    ttl_s: float

    def credentials(self, row: Any) -> dict[str, str]:
        if row["status"] == "pending" or not row["approved"]:
            return {}
        jwt, seed = natsauth.mint_worker(self.account, row["id"], self.ttl_s, row["node_type"] or "backend")
        return {"nats_jwt": jwt, "nats_user_seed": seed}


async def announce_node(events: NodeEvents, nc: Client | None, node_id: str, status: str) -> None:
    """Tell this frontend (at once) and every other one (over NATS) that a node changed."""
    events.notify(node_id, status)
    await publish_node_event(nc, node_id, status)


@dataclass
class NodeLifecycle:
    pool: asyncpg.Pool
    nc: Client | None
    held: HeldBeats
    events: NodeEvents
    checkpointer: HeartbeatCheckpointer
    monitor: HealthMonitor
    xmin: XminAgeSampler
    minter: Minter | None = None
    user_auth: bool = (
        False  # LOCALAI_AUTH: API keys required on every route but health checks and /api/node/*
    )
    metrics_token: str = ""  # CORRAL_METRICS_TOKEN: scrape token for /metrics
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @classmethod
    def build(
        cls,
        pool: asyncpg.Pool,
        nc: Client | None,
        settings: Any,
        listeners: Iterable[NodeListener] = (),
        key_revoked: Iterable[Callable[[str], None]] = (),
    ) -> NodeLifecycle:
        """`listeners`: told of every node event (this frontend's and the others', over NATS); `key_revoked`:
        of every API key revoked (by its hash)."""
        held = HeldBeats(nc)
        minter = None
        if settings.nats_account_seed:
            try:
                account = natsauth.pair_from_seed(
                    settings.nats_account_seed, kind="account", setting="LOCALAI_NATS_ACCOUNT_SEED"
                )
            except natsauth.NatsAuthError as exc:
                raise ConfigError(str(exc)) from None
            minter = Minter(account, settings.nats_worker_jwt_ttl_s)
        checkpointer = HeartbeatCheckpointer(pool, held, settings.node_heartbeat_checkpoint_s)
        events = NodeEvents([checkpointer.on_node_event, *listeners], key_revoked)

        async def announce(change: StatusChange) -> None:
            await announce_node(events, nc, change.node_id, change.new)

        return cls(
            pool=pool,
            nc=nc,
            held=held,
            events=events,
            checkpointer=checkpointer,
            monitor=HealthMonitor(
                pool,
                held,
                stale_threshold_s=settings.stale_node_threshold_s,
                interval_s=settings.health_check_interval_s,
                pending_expiry_s=settings.pending_node_expiry_s,
                on_change=announce,
            ),
            xmin=XminAgeSampler(pool),
            minter=minter,
            user_auth=bool(settings.auth),
            metrics_token=settings.metrics_token,
        )

    async def node_changed(self, node_id: str, status: str) -> None:
        await announce_node(self.events, self.nc, node_id, status)

    async def start(self) -> None:
        if self.nc is not None:
            await self.events.subscribe(self.nc)
            await self.held.start()
        register_gauge(self.xmin)
        self._tasks = [
            asyncio.create_task(self.monitor.run(self._stop), name="health-monitor"),
            asyncio.create_task(self.xmin.run(self._stop), name="xmin-age"),
        ]
        for task in self._tasks:
            task.add_done_callback(self._on_task_done)

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        """The lifecycle's long-lived tasks, for the process that owns it to watch."""
        return list(self._tasks)

    def _on_task_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None and not self._stop.is_set():
            log.error("background loop %s died: %r", task.get_name(), task.exception())

    async def stop(self) -> None:
        self._stop.set()
        if self._tasks:
            _done, pending = await asyncio.wait(self._tasks, timeout=STOP_TIMEOUT_S)
            for task in pending:
                task.cancel()
