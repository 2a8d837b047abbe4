"""The backend's fast lane: the servicer's Predict/PredictStream/Embedding/TokenizeString over plain TCP.

Same servicer, same admission, same statuses as gRPC (see `corral.lane.frames` for the frames); a
frontend uses it when `Status` advertises its port. The first frame must be HELLO with the bearer
token (`LOCALAI_GRPC_AUTH_TOKEN`, compared in constant time) within `HELLO_TIMEOUT_S`; anything else
closes the connection. A CANCEL or a closed connection cancels the call, as a gRPC cancellation does,
so the generation stops at its next token. A stream waits while the connection's send buffer is full:
the engine's pieces then pile up in the reply pump and leave as one message (coalescing for a reader
slower than the engine). A TRACE frame before a CALL carries the caller's W3C trace context: when the
backend traces, the call's server span is the caller's child, as over gRPC (`backends.tracing_interceptor`).
The protocol is written down in `PROTOCOL.md`.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn

import grpc
from opentelemetry.trace import SpanKind

from corral.lane import frames
from corral.proto import backend_pb2 as pb
from corral.runtime import eager
from corral.telemetry import tracing

log = logging.getLogger(__name__)

FAST_LANE_ENV = "CORRAL_BACKEND_FAST_LANE"  # "0" serves gRPC only (the frontend then uses gRPC)
HELLO_TIMEOUT_S = 10.0


def fast_lane_enabled() -> bool:
    return os.environ.get(FAST_LANE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


class LaneAbort(Exception):
    """What `context.abort` raises on the lane: the call ends with this status."""

    def __init__(self, status: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.status, self.details = status, details


class LaneContext:
    """The part of `grpc.aio.ServicerContext` the servicer uses."""

    async def abort(self, code: grpc.StatusCode, details: str = "") -> NoReturn:
        raise LaneAbort(code, details)


CONTEXT = LaneContext()


class _Connection(asyncio.Protocol):
    def __init__(
        self,
        servicer: Any,
        token: bytes | None,
        calls: set[asyncio.Task[None]],
        connections: set[_Connection],
    ) -> None:
        self._servicer, self._token, self._all_calls, self._connections = servicer, token, calls, connections
        self._reader = frames.FrameReader(limit=frames.MAX_HELLO_BYTES)
        self._calls: dict[int, asyncio.Task[None]] = {}
        self._welcomed = False
        self._writable = asyncio.Event()
        self._writable.set()
        self._writer: frames.FrameWriter | None = None
        self._hello_timer: asyncio.TimerHandle | None = None
        self._trace: tuple[int, bytes] | None = None  # the last TRACE frame: (call id, payload)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._writer = frames.FrameWriter(transport)  # type: ignore[arg-type]
        self._connections.add(self)
        self._hello_timer = asyncio.get_running_loop().call_later(HELLO_TIMEOUT_S, self._close)

    def connection_lost(self, exc: Exception | None) -> None:
        self._writer = None
        self._connections.discard(self)
        self._writable.set()
        if self._hello_timer is not None:
            self._hello_timer.cancel()
        for task in self._calls.values():
            task.cancel()  # the caller is gone: stop generating

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def close(self) -> None:
        self._close()

    def _close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _send(self, data: bytes) -> None:
        if self._writer is not None:
            self._writer.write(data)

    def data_received(self, data: bytes) -> None:
        try:
            received = self._reader.feed(data)
        except frames.FrameTooLarge as exc:
            log.warning("fast lane: closing a connection that %s", exc)
            self._close()
            return
        for kind, call_id, payload in received:
            if not self._welcomed:
                self._hello(kind, payload)
            elif kind == frames.CALL:
                self._start(call_id, payload)
            elif kind == frames.CANCEL:
                task = self._calls.get(call_id)
                if task is not None:
                    task.cancel()
            elif kind == frames.PING:
                self._send(frames.frame(frames.PONG, call_id))
            elif kind == frames.TRACE:  # for the CALL of this id, which follows
                self._trace = (call_id, payload) if len(payload) <= frames.MAX_TRACE_BYTES else None
            if self._writer is None:
                return

    def _hello(self, kind: int, payload: bytes) -> None:
        if self._hello_timer is not None:
            self._hello_timer.cancel()
            self._hello_timer = None
        if kind != frames.HELLO:
            self._close()
            return
        if self._token is not None and not hmac.compare_digest(payload, self._token):
            detail = "missing bearer token: send it in HELLO" if not payload else "invalid bearer token"
            self._send(frames.error_frame(0, grpc.StatusCode.UNAUTHENTICATED, detail))
            self._close()
            return
        self._welcomed = True
        self._reader.limit = frames.MAX_PAYLOAD_BYTES
        self._send(frames.frame(frames.WELCOME, 0))

    def _start(self, call_id: int, payload: bytes) -> None:
        trace, self._trace = self._trace, None
        method = frames.METHODS_BY_CODE.get(payload[0]) if payload else None
        if method is None:
            self._send(frames.error_frame(call_id, grpc.StatusCode.UNIMPLEMENTED, "unknown fast lane method"))
            return
        if call_id in self._calls:
            self._send(
                frames.error_frame(call_id, grpc.StatusCode.ALREADY_EXISTS, f"call {call_id} is running")
            )
            return
        try:
            request = pb.PredictOptions.FromString(payload[1:])
        except Exception:
            self._send(frames.error_frame(call_id, grpc.StatusCode.INTERNAL, "could not parse the request"))
            return
        handler = getattr(self._servicer, method.name)
        body = (
            self._stream(call_id, handler, request)
            if method.streams
            else self._unary(call_id, handler, request)
        )
        if tracing.tracer is not None:  # a server span, the caller's child when its TRACE came with the call
            body = _traced(method.name, body, trace[1] if trace is not None and trace[0] == call_id else None)
            task = asyncio.ensure_future(self._run(call_id, body))
        else:  # started here: an engine that answers without waiting answers in this callback, without a task
            waits = eager.start(self._run(call_id, body))
            if waits is None:
                return
            task = waits
        self._calls[call_id] = task
        self._all_calls.add(task)
        task.add_done_callback(lambda done: self._finished(call_id, done))

    def _finished(self, call_id: int, task: asyncio.Task[None]) -> None:
        self._all_calls.discard(task)
        if self._calls.get(call_id) is task:
            del self._calls[call_id]

    async def _run(self, call_id: int, body: Awaitable[None]) -> None:
        try:
            await body
        except LaneAbort as exc:
            self._send(frames.error_frame(call_id, exc.status, exc.details))
        except asyncio.CancelledError:
            pass  # cancelled by the caller: it expects nothing more
        except Exception as error:  # not `exc` again: compiled, one name keeps its first clause's type
            log.exception("fast lane call failed")
            self._send(
                frames.error_frame(
                    call_id, grpc.StatusCode.UNKNOWN, f"Unexpected {type(error).__name__}: {error}"
                )
            )

    async def _unary(self, call_id: int, handler: Callable[..., Awaitable[Any]], request: Any) -> None:
        reply = await handler(request, CONTEXT)
        self._send(frames.frame(frames.REPLY, call_id, reply.SerializeToString()))

    async def _stream(self, call_id: int, handler: Callable[..., AsyncIterator[Any]], request: Any) -> None:
        replies = handler(request, CONTEXT)
        try:
            async for reply in replies:
                self._send(frames.frame(frames.REPLY, call_id, reply.SerializeToString()))
                if not self._writable.is_set():  # the reader is slower: let the pump coalesce meanwhile
                    await self._writable.wait()
            self._send(frames.frame(frames.END, call_id))
        finally:
            await replies.aclose()  # type: ignore[attr-defined]


async def _traced(method: str, body: Awaitable[None], trace: bytes | None) -> None:
    """`body` inside the span the gRPC server's TracingInterceptor opens for the same call."""
    parent = tracing.extract(frames.parse_trace(trace)) if trace is not None else None
    attributes = {"rpc.system": "grpc", "rpc.method": method, "corral.transport": "lane"}
    with tracing.span(f"backend.{method}", attributes, kind=SpanKind.SERVER, context=parent):
        await body


class LaneServer:
    """Listens next to the gRPC server; `port` is what `Status` advertises."""

    def __init__(self, servicer: Any, token: str | None) -> None:
        self._servicer = servicer
        self._token = token.encode("utf-8") if token else None
        self._server: asyncio.Server | None = None
        self._calls: set[asyncio.Task[None]] = set()
        self._connections: set[_Connection] = set()
        self.port = 0

    async def start(self, host: str) -> int:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self._servicer, self._token, self._calls, self._connections), host, 0
        )
        # Any: typeshed's `sockets` is a tuple, uvloop's a list (mypyc checks it)
        listening: Any = self._server
        self.port = int(listening.sockets[0].getsockname()[1])
        return self.port

    async def close(self, grace_s: float = 0.0) -> None:
        """Stop listening, give running calls `grace_s` to finish (as the gRPC server's stop), cancel the rest."""
        if self._server is None:
            return
        self._server.close()
        if self._calls and grace_s > 0:
            await asyncio.wait(list(self._calls), timeout=grace_s)
        for task in list(self._calls):
            task.cancel()
        await asyncio.gather(*self._calls, return_exceptions=True)
        for connection in list(self._connections):
            connection.close()
        await self._server.wait_closed()
        await asyncio.sleep(0)  # let the closed transports release their sockets
        self._server = None
