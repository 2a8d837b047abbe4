"""The floor of any Python router: an HTTP/1.1 proxy on uvloop + httptools that does nothing but forward.

`python benchmarks/python_floor_proxy.py LISTEN_PORT UPSTREAM_PORT` forwards each request on a client connection,
unchanged, over a kept-alive connection of its own to 127.0.0.1:UPSTREAM_PORT and relays the answer: one read
and one write each way per request, one parse of each message (httptools, C), no JSON, no validation, no
routing. benchmarks/routing_overhead.py runs it in front of its minimal server, beside vllm-router, so the
CPU a request costs corral can be read against what the interpreter and the event loop alone cost.
"""

from __future__ import annotations

import asyncio
import socket
import sys

import httptools
import uvloop


class _Upstream(asyncio.Protocol):
    """The kept-alive connection to the upstream of one client connection: relays each answer back."""

    def __init__(self, client: asyncio.Transport) -> None:
        self.client = client
        self.parser = httptools.HttpResponseParser(self)
        self.buffer: list[bytes] = []
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer.append(data)
        self.parser.feed_data(data)

    def on_message_complete(self) -> None:
        self.client.write(b"".join(self.buffer))
        self.buffer.clear()


class _Client(asyncio.Protocol):
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.parser = httptools.HttpRequestParser(self)
        self.buffer: list[bytes] = []
        self.pending: list[bytes] = []
        self.upstream: _Upstream | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        _, upstream = await loop.create_connection(
            lambda: _Upstream(self.transport), "127.0.0.1", self.upstream_port
        )
        self.upstream = upstream
        for request in self.pending:
            upstream.transport.write(request)  # type: ignore[union-attr]
        self.pending.clear()

    def data_received(self, data: bytes) -> None:
        self.buffer.append(data)
        self.parser.feed_data(data)

    def on_message_complete(self) -> None:
        request = b"".join(self.buffer)
        self.buffer.clear()
        if self.upstream is None or self.upstream.transport is None:
            self.pending.append(request)
        else:
            self.upstream.transport.write(request)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()


async def _serve(listen_port: int, upstream_port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Client(upstream_port), "127.0.0.1", listen_port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(_serve(int(sys.argv[1]), int(sys.argv[2])))
