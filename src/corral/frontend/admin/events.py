"""`GET /api/events` (admin): server-sent events that tell the web UI what changed.

Fed by what NATS already carries — node status changes (`state.nodes.events`), replica changes
(`corral.replicas`), load outcomes (`corral.load.*`) and model config edits
(`cache.invalidate.models`) — so every frontend sees every change, whichever frontend made it.
An event is a hint: the UI re-reads the API it names, never trusts the payload (anyone on the bus
can publish one). Only a few routing fields are forwarded, never a whole message.

One NATS subscription per subject for the whole process, made when the first client connects;
each client has a bounded queue, and a client that does not read loses events (it gets a
`resync` event instead and re-reads everything).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from nats.aio.client import Client
from nats.aio.msg import Msg

from corral.frontend.errors import envelope
from corral.loading.request_waiters import EVENT_SUBJECT_PREFIX as LOAD_PREFIX
from corral.nodes.events import NODE_EVENTS_SUBJECT
from corral.revisions.edits import SUBJECT as CONFIG_SUBJECT
from corral.routing.events import SUBJECT as REPLICA_SUBJECT

log = logging.getLogger(__name__)

CLIENT_QUEUE_MAX = 256  # events buffered for one slow client before it is told to resync
CLIENTS_MAX = 64  # concurrent UI streams per frontend: each holds a queue and a connection
KEEPALIVE_S = 15.0  # a comment line keeps proxies from closing an idle stream
FIELD_MAX = 255  # a forwarded string field is cut to this (names are varchar(255))
FORWARDED = {  # kind -> (subject to subscribe, payload fields forwarded to the browser)
    "node": (NODE_EVENTS_SUBJECT, ("node_id", "status")),
    "replica": (REPLICA_SUBJECT, ("op", "model", "node_id", "node_name", "replica_index")),
    "load": (f"{LOAD_PREFIX}.*", ("tracking_key", "ok", "error")),
    "config": (CONFIG_SUBJECT, ("element", "op", "config_revision")),
}


def event_payload(kind: str, data: bytes) -> dict[str, Any] | None:
    """The few scalar fields of a bus message the UI may use to choose what to re-read; None if malformed."""
    try:
        body = json.loads(data)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    out: dict[str, Any] = {"kind": kind}
    for name in FORWARDED[kind][1]:
        value = body.get(name)
        if isinstance(value, str):
            out[name] = value[:FIELD_MAX]
        elif isinstance(value, bool | int | float) or value is None:
            out[name] = value
    return out


class EventHub:
    """Fans the bus's change hints out to connected UI clients."""

    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self._clients: set[asyncio.Queue[dict[str, Any]]] = set()
        self._subscribed = False
        self._lock = asyncio.Lock()

    @property
    def client_count(self) -> int:
        return len(self._clients)

    async def _subscribe(self) -> None:
        async with self._lock:
            if self._subscribed:
                return
            for kind, (subject, _fields) in FORWARDED.items():
                await self.nc.subscribe(subject, cb=self._callback(kind))
            self._subscribed = True

    def _callback(self, kind: str) -> Callable[[Msg], Awaitable[None]]:
        async def on_msg(msg: Msg) -> None:
            payload = event_payload(kind, msg.data)
            if payload is not None:
                self.publish(payload)

        return on_msg

    def publish(self, payload: dict[str, Any]) -> None:
        for queue in self._clients:
            if queue.full():
                with contextlib.suppress(asyncio.QueueEmpty):
                    while True:
                        queue.get_nowait()
                queue.put_nowait({"kind": "resync"})
            else:
                queue.put_nowait(payload)

    @contextlib.asynccontextmanager
    async def client(self) -> AsyncIterator[asyncio.Queue[dict[str, Any]]]:
        await self._subscribe()
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(CLIENT_QUEUE_MAX)
        self._clients.add(queue)
        try:
            yield queue
        finally:
            self._clients.discard(queue)


async def event_stream(
    hub: EventHub, request: Request, keepalive_s: float = KEEPALIVE_S
) -> AsyncIterator[bytes]:
    async with hub.client() as queue:
        yield b"event: hello\ndata: {}\n\n"
        while not await request.is_disconnected():
            try:
                payload = await asyncio.wait_for(queue.get(), keepalive_s)
            except TimeoutError:
                yield b": keepalive\n\n"
                continue
            yield b"event: " + payload["kind"].encode() + b"\ndata: " + json.dumps(payload).encode() + b"\n\n"


def build_events_router(hub: EventHub) -> APIRouter:
    router = APIRouter()

    @router.get("/api/events", include_in_schema=False)  # an endless stream: no schema-driven client calls it
    async def events(request: Request) -> Any:
        if hub.client_count >= CLIENTS_MAX:
            return JSONResponse(
                envelope(
                    f"too many event streams on this frontend (at most {CLIENTS_MAX}); "
                    "close another tab or use another frontend",
                    "rate_limit_error",
                    429,
                ),
                status_code=429,
            )
        return StreamingResponse(
            event_stream(hub, request),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    return router
