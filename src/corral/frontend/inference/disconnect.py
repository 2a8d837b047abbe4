"""Cancel a request's work when its client goes away, so the backend stops generating for nobody.

uvicorn's `receive()` answers `http.disconnect` once the connection is lost (after the body was read).
A watcher awaits it and cancels the request's task: the gRPC call beneath is cancelled with it
(routing/calls.py), unary or streamed, during prefill too (a stream alone would only notice on
its next write). A response that already finished is never cancelled.

The watcher task starts `WATCH_AFTER_S` into the request, not with it: most warm unary requests answer
sooner and never pay for a task (~8 µs of CPU each, benchmarks/routing_overhead.py); a client that left
earlier is still noticed then, as uvicorn keeps answering `http.disconnect` once the connection is gone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from corral.runtime.httpguard import DISCONNECT_KEY

log = logging.getLogger(__name__)

WATCH_AFTER_S = 0.05  # at most this much backend work for a client that is already gone

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


async def respond_until_disconnect(
    receive: Receive,
    send: Send,
    respond: Callable[[Send], Awaitable[None]],
    scope: dict[str, Any] | None = None,
) -> None:
    """Run `respond(send)`; cancel it if the client disconnects before the response is complete.

    Where the HTTP server offers it (`scope[DISCONNECT_KEY]`, runtime/httpguard.py), the lost connection
    cancels the request itself: no timer, no watcher task, no wrapped `send`."""
    task = asyncio.current_task()
    watch_disconnect = None if scope is None else scope.get(DISCONNECT_KEY)
    if watch_disconnect is not None and task is not None:
        await _respond_cancelled_by_server(task, watch_disconnect, send, respond)
        return
    state = {"finished": False, "cancelled": False}

    async def tracking_send(message: Message) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            state["finished"] = True
        await send(message)

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        if not state["finished"] and task is not None:
            state["cancelled"] = True
            task.cancel()

    loop = asyncio.get_running_loop()
    watcher: asyncio.Task[None] | None = None

    def start_watching() -> None:
        nonlocal watcher
        watcher = loop.create_task(watch())

    timer = loop.call_later(WATCH_AFTER_S, start_watching)
    try:
        await respond(tracking_send)
    except asyncio.CancelledError:
        if not state["cancelled"] or task is None:
            raise
        task.uncancel()
        log.debug("client disconnected: request cancelled")
    finally:
        timer.cancel()
        if watcher is not None:
            watcher.cancel()


async def _respond_cancelled_by_server(
    task: asyncio.Task[Any],
    watch_disconnect: Callable[[Callable[[], None] | None], None],
    send: Send,
    respond: Callable[[Send], Awaitable[None]],
) -> None:
    cancelled = False

    def gone() -> None:  # called by the protocol once, only while the response is not complete
        nonlocal cancelled
        cancelled = True
        task.cancel()

    watch_disconnect(gone)
    try:
        await respond(send)
    except asyncio.CancelledError:
        if not cancelled:
            raise
        task.uncancel()
        log.debug("client disconnected: request cancelled")
    finally:
        watch_disconnect(None)


class CancelOnDisconnect:
    """ASGI wrapper: for the listed paths (FastAPI routes that call a backend: the modality endpoints), read the
    body first, then run the app under `respond_until_disconnect`, so a client that goes away cancels the backend
    call and releases the request's files on the worker (the JSON inference routes get this from the fast path)."""

    def __init__(
        self, app: Callable[[dict[str, Any], Receive, Send], Awaitable[None]], paths: frozenset[str]
    ) -> None:
        self.app, self.paths = app, paths

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") not in self.paths:
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body, replayed = b"".join(chunks), False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await respond_until_disconnect(
            receive, send, lambda watched_send: self.app(scope, replay, watched_send), scope
        )
