"""The HTTP server's lean cycle (runtime/httpguard.py): the same bytes on the wire as uvicorn's own cycle, in
one write; a streamed response's head still goes at once; a lost connection reaches the request that asked.

A real server (uvicorn with the guarded protocol, `EmbeddedHTTPServer`) on loopback, raw sockets as clients."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest

from corral.frontend.inference.fast_path import read_body
from corral.runtime.httpguard import DISCONNECT_KEY, LeanCycle
from corral.runtime.httpserver import EmbeddedHTTPServer
from corral.runtime.processes import free_port

BODY = b'{"ok":true}'
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]


class App:
    """/answer: the whole response through `LeanCycle.answer`; /send: the same as two ASGI messages;
    /stream: a chunked response whose first chunk waits for `release`; /stream-now: one whose first two chunks
    follow its start at once (its writes counted in `writes`); /stream-whole: one that ends in the turn it starts;
    /stream-broken: one whose app raises in that turn;
    /hold: waits until cancelled; /echo: the request's body as read with `receive`."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.gone = asyncio.Event()
        self.answered_directly = 0
        self.writes: list[bytes] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        path = scope["path"]
        if path == "/echo":
            headers = [(b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        if path == "/answer":
            cycle = send.__self__
            assert type(cycle) is LeanCycle
            if cycle.answer(200, HEADERS, BODY):
                self.answered_directly += 1
                return
        if path in ("/answer", "/send"):
            await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
            await send({"type": "http.response.body", "body": BODY})
        elif path == "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await self.release.wait()
            await send({"type": "http.response.body", "body": b"tok", "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        elif path == "/stream-now":
            cycle = send.__self__
            cycle.transport = _Counted(cycle.transport, self.writes)
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"tok", "more_body": True})
            await send({"type": "http.response.body", "body": b"en", "more_body": True})
            for _ in range(3):  # turns of the loop pass: nothing more is written
                await asyncio.sleep(0)
            await self.release.wait()
            await send({"type": "http.response.body", "body": b""})
        elif path == "/stream-whole":
            cycle = send.__self__
            cycle.transport = _Counted(cycle.transport, self.writes)
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"tok", "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        elif path == "/stream-broken":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"tok", "more_body": True})
            raise RuntimeError("the app failed in the turn its stream started")
        elif path == "/hold":
            scope[DISCONNECT_KEY](self.gone.set)
            await asyncio.sleep(3600)


class _Counted:
    """A transport that records what is written through it."""

    def __init__(self, transport: Any, writes: list[bytes]) -> None:
        self._transport, self._writes = transport, writes

    def write(self, data: bytes) -> None:
        self._writes.append(bytes(data))
        self._transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


@pytest.fixture
async def served() -> AsyncIterator[tuple[App, int]]:
    app = App()
    port = free_port()
    server = EmbeddedHTTPServer(app, "127.0.0.1", port, name="test-lean")
    await server.start()
    try:
        yield app, port
    finally:
        await server.stop()


def _request(path: str, *, method: str = "POST", close: bool = False) -> bytes:
    extra = b"connection: close\r\n" if close else b""
    return f"{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n".encode() + extra + b"\r\n{}"


async def _responses(reader: asyncio.StreamReader, count: int) -> list[bytes]:
    out = []
    for _ in range(count):
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        length = int(re.search(rb"content-length: (\d+)", head).group(1))  # type: ignore[union-attr]
        out.append(head + await asyncio.wait_for(reader.readexactly(length), 5))
    return out


def _undated(response: bytes) -> bytes:
    return re.sub(rb"date: [^\r]*\r\n", b"", response)


async def test_a_whole_answer_is_byte_for_byte_what_the_two_messages_write(served: tuple[App, int]) -> None:
    app, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_request("/answer") + _request("/send"))  # pipelined, on one kept-alive connection
    direct, messages = await _responses(reader, 2)
    assert app.answered_directly == 1
    assert _undated(direct) == _undated(messages)
    assert direct.startswith(b"HTTP/1.1 200 OK\r\n") and direct.endswith(b"\r\n\r\n" + BODY)
    for _ in range(3):  # the connection stays usable, answers in order
        writer.write(_request("/answer"))
        assert (await _responses(reader, 1))[0].endswith(BODY)
    writer.close()


async def test_a_client_that_asks_to_close_gets_connection_close_and_the_connection_ends(
    served: tuple[App, int],
) -> None:
    app, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_request("/answer", close=True))
    (response,) = await _responses(reader, 1)
    assert b"connection: close\r\n" in response
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server
    writer.close()


async def test_a_head_response_still_sends_its_head(served: tuple[App, int]) -> None:
    _app, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_request("/send", method="HEAD"))
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 200 OK") and b"content-length: 11" in head
    writer.close()


async def test_a_streamed_response_sends_its_head_before_its_first_chunk(served: tuple[App, int]) -> None:
    app, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_request("/stream"))
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)  # while the app still holds its chunk
    assert b"transfer-encoding: chunked" in head
    app.release.set()
    assert await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), 5) == b"3\r\ntok\r\n0\r\n\r\n"
    writer.close()


async def test_a_streamed_response_writes_what_it_sends_in_its_first_turn_with_its_head(
    served: tuple[App, int],
) -> None:
    """A stream that starts with its first parts in hand (a chat's role chunk and first token) leaves in one write:
    one segment, one wake-up of the client, where uvicorn writes the head and each chunk apart."""
    app, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_request("/stream-now"))
    first = await asyncio.wait_for(reader.readuntil(b"en\r\n"), 5)
    assert first.startswith(b"HTTP/1.1 200 OK") and first.endswith(b"\r\n\r\n3\r\ntok\r\n2\r\nen\r\n")
    assert app.writes == [first]
    app.release.set()
    assert await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), 5) == b"0\r\n\r\n"
    writer.close()


@pytest.mark.parametrize("close", [False, True])
async def test_a_stream_that_ends_in_its_first_turn_is_one_write_and_whole_before_the_connection_closes(
    served: tuple[App, int], close: bool
) -> None:
    """uvicorn closes a connection that is not kept alive inside the `send` that completes the response: what
    was held is written first, and the connection still ends."""
    app, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_request("/stream-whole", close=close))
    whole = await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), 5)
    assert whole.startswith(b"HTTP/1.1 200 OK") and whole.endswith(b"\r\n\r\n3\r\ntok\r\n0\r\n\r\n")
    assert app.writes == [whole]
    if close:
        assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()


async def test_a_stream_whose_app_fails_in_its_first_turn_still_writes_what_it_sent_before_the_close(
    served: tuple[App, int],
) -> None:
    """uvicorn closes the connection of a started response whose app raised: what the app had sent is written
    first, as when each part was written at once."""
    _app, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_request("/stream-broken"))
    received = await asyncio.wait_for(reader.read(), 5)  # until the server closes
    assert received.startswith(b"HTTP/1.1 200 OK") and received.endswith(b"\r\n\r\n3\r\ntok\r\n")
    writer.close()


async def test_a_lost_connection_reaches_the_request_that_asked(served: tuple[App, int]) -> None:
    app, port = served
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_request("/hold"))
    await writer.drain()
    await asyncio.sleep(0.2)
    assert not app.gone.is_set()
    writer.close()
    await asyncio.wait_for(app.gone.wait(), 5)


async def test_a_lost_connection_is_seen_after_a_body_past_the_high_water_mark(
    served: tuple[App, int],
) -> None:
    """A large body leaves uvicorn's transport paused; the watch resumes reading, so the client's EOF arrives."""
    app, port = served
    body = b"x" * (256 << 10)
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"POST /hold HTTP/1.1\r\nhost: x\r\ncontent-length: {len(body)}\r\n\r\n".encode() + body)
    await writer.drain()
    await asyncio.sleep(0.3)
    assert not app.gone.is_set()
    writer.close()
    await asyncio.wait_for(app.gone.wait(), 5)


async def test_a_body_in_parts_is_read_whole_whether_it_came_before_or_after_the_app_waited(
    served: tuple[App, int],
) -> None:
    """The cycle makes its receive event only when something waits, and keeps a one-part body without a copy:
    a body whole before the app reads, and one whose parts arrive while it waits, both reach it whole."""
    _app, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    parts = [b"a" * 70_000, b"b" * 5, b"c" * 3]  # past one read, then two small writes
    body = b"".join(parts)
    writer.write(f"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: {len(body)}\r\n\r\n".encode())
    for part in parts:
        await asyncio.sleep(0.05)  # the app is waiting for the next part
        writer.write(part)
        await writer.drain()
    writer.write(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nwhole")
    await writer.drain()
    first, second = await _responses(reader, 2)
    assert first.endswith(b"\r\n\r\n" + body)
    assert second.endswith(b"\r\n\r\nwhole")  # one part, whole before the app ran
    writer.close()
