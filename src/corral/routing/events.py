"""Replica events on NATS: every replica change is published so every frontend's view follows it."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass

from nats.aio.client import Client
from nats.aio.msg import Msg

log = logging.getLogger(__name__)

SUBJECT = "corral.replicas"
LOADED, REMOVED, UNLOADING = "loaded", "removed", "unloading"


@dataclass(frozen=True)
class ReplicaEvent:
    op: str
    model: str
    node_id: str
    node_name: str
    replica_index: int
    address: str
    mark: str = ""  # eviction mark to acknowledge (UNLOADING only)


async def publish(nc: Client, event: ReplicaEvent) -> None:
    await nc.publish(SUBJECT, json.dumps(asdict(event)).encode())


async def subscribe(nc: Client, handler: Callable[[ReplicaEvent], Awaitable[None]]) -> None:
    async def on_msg(msg: Msg) -> None:
        try:
            event = ReplicaEvent(**json.loads(msg.data))
        except (ValueError, TypeError):
            log.debug("ignoring malformed replica event")
            return
        await handler(event)

    await nc.subscribe(SUBJECT, cb=on_msg)
