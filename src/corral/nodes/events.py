"""Node status changes and API-key revocations, broadcast between frontends over NATS.

Every frontend drops what it holds about a node when it hears of a change (its heartbeat
checkpoint entry, its routable replicas), so the next beat from that node is written at
once and a drained/offline node stops receiving warm-path work everywhere. A missed event
costs at most one checkpoint interval: the node's next durable write reads its status back.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable

from nats.aio.client import Client
from nats.aio.msg import Msg

log = logging.getLogger(__name__)

NODE_EVENTS_SUBJECT = "state.nodes.events"
KEY_REVOKED_SUBJECT = "state.api-keys.revoked"

NodeListener = Callable[[str, str], None]  # (node_id, status or "deleted")


async def publish_node_event(nc: Client | None, node_id: str, status: str) -> None:
    if nc is None or not nc.is_connected:
        return
    await nc.publish(NODE_EVENTS_SUBJECT, json.dumps({"node_id": node_id, "status": status}).encode())


async def publish_key_revoked(nc: Client | None, hashed: str) -> None:
    if nc is None or not nc.is_connected:
        return
    await nc.publish(KEY_REVOKED_SUBJECT, json.dumps({"key_hash": hashed}).encode())


class NodeEvents:
    """Fans node events and key revocations from NATS out to in-process listeners."""

    def __init__(
        self, listeners: Iterable[NodeListener] = (), key_revoked: Iterable[Callable[[str], None]] = ()
    ) -> None:
        self.listeners: list[NodeListener] = list(listeners)
        self.key_revoked_listeners: list[Callable[[str], None]] = list(key_revoked)

    def key_revoked(self, hashed: str) -> None:
        for listener in self.key_revoked_listeners:
            listener(hashed)

    def notify(self, node_id: str, status: str) -> None:
        for listener in self.listeners:
            try:
                listener(node_id, status)
            except Exception:  # one broken listener must not starve the others
                log.exception("node event listener failed")

    async def subscribe(self, nc: Client) -> None:
        async def on_event(msg: Msg) -> None:
            try:
                body = json.loads(msg.data)
                self.notify(str(body["node_id"]), str(body["status"]))
            except (ValueError, KeyError, TypeError):
                log.warning("ignoring malformed node event on %s", msg.subject)

        async def on_revoked(msg: Msg) -> None:
            try:
                self.key_revoked(str(json.loads(msg.data)["key_hash"]))
            except (ValueError, KeyError, TypeError):
                log.warning("ignoring malformed key revocation on %s", msg.subject)

        await nc.subscribe(NODE_EVENTS_SUBJECT, cb=on_event)
        await nc.subscribe(KEY_REVOKED_SUBJECT, cb=on_revoked)
