"""Replica events on NATS: every replica change is published so every frontend's view follows it.

An event is a hint, not a fact: anyone on the bus can publish one. Receivers re-read PostgreSQL
before routing anywhere (`Router._on_event`); malformed events and invalid names are dropped here.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass

from nats.aio.client import Client
from nats.aio.msg import Msg

from corral.models.names import is_valid_name

log = logging.getLogger(__name__)

SUBJECT = "corral.replicas"
LOADED, REMOVED, UNLOADING = "loaded", "removed", "unloading"
OPS = frozenset({LOADED, REMOVED, UNLOADING})


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
        if (
            event.op not in OPS
            or not is_valid_name(event.model)
            or not isinstance(event.replica_index, int)
            or not isinstance(event.node_id, str)
            or not isinstance(event.mark, str)
        ):
            log.debug("ignoring invalid replica event %r", event)
            return
        await handler(event)

    await nc.subscribe(SUBJECT, cb=on_msg)
