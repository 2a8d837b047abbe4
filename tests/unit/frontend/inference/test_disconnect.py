"""A client that goes away cancels the request's work; a finished response is never cancelled."""

from __future__ import annotations

import asyncio
from typing import Any

from corral.frontend.inference.disconnect import WATCH_AFTER_S, Message, Send, respond_until_disconnect


async def test_a_disconnect_cancels_the_response_in_progress_and_returns_quietly() -> None:
    gone = asyncio.Event()
    cancelled = []

    async def receive() -> Message:
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        pass

    async def respond(send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        try:
            await asyncio.sleep(3600)  # e.g. waiting for a backend's answer
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    task = asyncio.create_task(respond_until_disconnect(receive, send, respond))
    await asyncio.sleep(0.01)
    gone.set()
    await asyncio.wait_for(task, 5)
    assert cancelled == [True]
    assert not task.cancelled()


async def test_a_disconnect_after_the_last_body_message_cancels_nothing() -> None:
    sent: list[Message] = []
    finished = asyncio.Event()

    async def receive() -> Message:
        await finished.wait()
        return {"type": "http.disconnect"}  # uvicorn answers disconnect once the response is complete

    async def send(message: Message) -> None:
        sent.append(message)

    async def respond(send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        finished.set()
        await asyncio.sleep(0.05)  # the response's own cleanup after the last byte
        sent.append({"type": "cleanup done"})

    await respond_until_disconnect(receive, send, respond)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body", "cleanup done"]


async def test_a_response_done_before_the_watch_starts_never_reads_the_connection() -> None:
    reads = []

    async def receive() -> Message:
        reads.append(True)
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        pass

    async def respond(send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    await respond_until_disconnect(receive, send, respond)
    await asyncio.sleep(WATCH_AFTER_S * 2)  # the watch timer was cancelled with the response
    assert reads == []


async def test_where_the_server_reports_a_lost_connection_it_cancels_the_request_without_a_watcher() -> None:
    """`scope[DISCONNECT_KEY]` (runtime/httpguard.py LeanCycle): the server calls back; `receive` is never read."""
    from corral.runtime.httpguard import DISCONNECT_KEY

    callbacks: list[Any] = []
    cancelled = []

    async def receive() -> Message:
        raise AssertionError("the server reports the disconnect: nothing polls receive()")

    async def send(message: Message) -> None:
        pass

    async def respond(send: Send) -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    scope = {DISCONNECT_KEY: callbacks.append}
    task = asyncio.create_task(respond_until_disconnect(receive, send, respond, scope))
    await asyncio.sleep(0.01)
    callbacks[-1]()  # the connection was lost
    await asyncio.wait_for(task, 5)
    assert cancelled == [True] and not task.cancelled()
    assert callbacks[-1] is None  # unregistered when the response ends

    async def quick(send: Send) -> None:
        pass

    await respond_until_disconnect(receive, send, quick, scope)
    assert callbacks[-1] is None
