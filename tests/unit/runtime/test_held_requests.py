"""Requests the HTTP server holds for its app's direct path (runtime/httpguard.py): no task until the body is whole,
then `take` answers from the protocol's own callback, or declines and the request runs as a task as before.

A real server (uvicorn with the guarded protocol, `EmbeddedHTTPServer`) on loopback, raw sockets as clients; the
app's `direct` is a small stand-in for frontend/direct_path.py that records what it was offered."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest

from corral.frontend.inference.fast_path import read_body
from corral.runtime.httpguard import LeanCycle
from corral.runtime.httpserver import EmbeddedHTTPServer
from corral.runtime.processes import free_port

JSON = [(b"content-type", b"application/json")]


def _answer(cycle: LeanCycle, body: bytes) -> None:
    assert cycle.answer(200, [*JSON, (b"content-length", str(len(body)).encode())], body)


class Direct:
    """Holds POST /hot; `take` answers it at once (with the body it saw) unless the body says "decline"."""

    def __init__(self) -> None:
        self.offered: list[tuple[bytes, bool]] = []  # (the body, whether a task was running)
        self.served: list[bytes] = []
        self.later: list[LeanCycle] = []

    def route(self, scope: dict[str, Any]) -> Any:
        length = int(dict(scope["headers"]).get(b"content-length", b"0"))
        return (scope["path"], length) if scope["path"] in ("/hot", "/later") else None

    def holds(self, chosen: Any, max_body: int) -> bool:
        return bool(chosen[1] <= max_body)  # as DirectPath: the declared length within the server's bound

    def take(self, cycle: LeanCycle, chosen: Any) -> bool:
        body = bytes(cycle.body)
        self.offered.append((body, asyncio.current_task() is not None))
        if body == b"decline":
            return False
        if chosen[0] == "/later":  # answered from a later callback, as a lane reply would
            self.later.append(cycle)
            return True
        _answer(cycle, b"took:" + body)
        return True

    async def serve(self, scope: dict[str, Any], receive: Any, send: Any, chosen: Any) -> None:
        body = await read_body(receive)
        self.served.append(body)
        content = b"served:" + body[:20]
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [*JSON, (b"content-length", b"%d" % len(content))],
            }
        )
        await send({"type": "http.response.body", "body": content})


class App:
    def __init__(self) -> None:
        self.direct = Direct()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Only the server's own warm-up request comes here (httpserver.py): the direct path takes the rest."""
        assert scope["type"] != "http" or scope["path"].startswith("/_corral/"), scope["path"]
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})


@pytest.fixture
async def served() -> AsyncIterator[tuple[Direct, int]]:
    app = App()
    port = free_port()
    server = EmbeddedHTTPServer(app, "127.0.0.1", port, name="test-held")
    await server.start()
    try:
        yield app.direct, port
    finally:
        await server.stop()


def _head(path: str, length: int, extra: bytes = b"") -> bytes:
    return f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {length}\r\n".encode() + extra + b"\r\n"


async def _response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    length = int(re.search(rb"content-length: (\d+)", head).group(1))  # type: ignore[union-attr]
    return head, await asyncio.wait_for(reader.readexactly(length), 5)


async def test_a_held_request_is_offered_once_with_its_whole_body_outside_any_task(
    served: tuple[Direct, int],
) -> None:
    direct, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_head("/hot", 10) + b"hello")
    await writer.drain()
    await asyncio.sleep(0.2)
    assert direct.offered == []  # half a body: nothing offered yet
    writer.write(b"world")
    head, body = await _response(reader)
    assert head.startswith(b"HTTP/1.1 200 OK") and body == b"took:helloworld"
    assert direct.offered == [(b"helloworld", False)]  # from the protocol's callback: no task
    assert direct.served == []
    writer.close()


async def test_a_declined_request_runs_as_a_task_and_reads_its_whole_body(served: tuple[Direct, int]) -> None:
    direct, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_head("/hot", 7) + b"decline")
    assert (await _response(reader))[1] == b"served:decline"
    assert direct.offered == [(b"decline", False)] and direct.served == [b"decline"]
    writer.close()


async def test_pipelined_requests_are_each_answered_in_order(served: tuple[Direct, int]) -> None:
    direct, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_head("/hot", 1) + b"a" + _head("/hot", 7) + b"decline" + _head("/hot", 1) + b"c")
    answers = [(await _response(reader))[1] for _ in range(3)]
    assert answers == [b"took:a", b"served:decline", b"took:c"]
    writer.close()


async def test_a_request_answered_from_a_later_callback_keeps_the_connection_in_order(
    served: tuple[Direct, int],
) -> None:
    """A second request pipelined behind one still unanswered waits for it, and is offered after it."""
    direct, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_head("/later", 1) + b"x" + _head("/hot", 1) + b"y")
    await writer.drain()
    for _ in range(50):
        if direct.later:
            break
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.1)
    assert [body for body, _ in direct.offered] == [b"x"]  # the second waits behind the first's answer
    _answer(direct.later[0], b"late")
    assert (await _response(reader))[1] == b"late"
    assert (await _response(reader))[1] == b"took:y"
    writer.close()


async def test_expect_100_continue_and_large_bodies_are_not_held(served: tuple[Direct, int]) -> None:
    """A client waiting for 100 Continue would wait for ever on a held request; a body past uvicorn's high-water
    mark pauses reading until a task reads it. Both run as tasks, as before."""
    direct, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_head("/hot", 4, b"expect: 100-continue\r\n"))
    assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(b"body")
    assert (await _response(reader))[1] == b"served:body"
    large = b"z" * (256 << 10)
    writer.write(_head("/hot", len(large)) + large)
    assert (await _response(reader))[1] == b"served:" + b"z" * 20
    assert direct.offered == [] and [len(b) for b in direct.served] == [4, len(large)]
    writer.close()


async def test_a_client_that_leaves_before_its_body_is_whole_is_never_offered(
    served: tuple[Direct, int],
) -> None:
    direct, port = served
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_head("/hot", 100) + b"partial")
    await writer.drain()
    writer.close()
    await asyncio.sleep(0.3)
    assert direct.offered == [] and direct.served == []
