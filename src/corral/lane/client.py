"""The frontend's side of a backend's fast lane (`corral.lane.frames`): one persistent connection per backend.

`LaneConnection` has the stub's call shape for the methods the request path uses (`Predict`,
`Embedding`, `TokenizeString` awaitable with `cancel()`; `PredictStream` with `read()` → reply or
`grpc.aio.EOF`, and `cancel()`: it is a `routing.backend_caller.BackendCaller`, as the gRPC stub is), the
W3C trace context of the call's metadata travels in a TRACE frame (tracing never changes the transport),
and it fails calls with the same `grpc.aio.AioRpcError`s gRPC raises, so
`routing/calls.py` keeps its deadlines, retry/forget and error mapping whichever transport served:

* a unary call past its timeout fails DEADLINE_EXCEEDED and its CANCEL reaches the backend;
* cancelling a call (client disconnect, stream watchdog) sends CANCEL: the generation stops;
* a lost connection fails every call in flight UNAVAILABLE (the replica is then dropped and retried);
* while calls are in flight the connection is pinged every CORRAL_BACKEND_KEEPALIVE; when the backend sent
  nothing at all (no PONG, no reply) for CORRAL_BACKEND_KEEPALIVE_TIMEOUT since a ping, the calls fail
  UNAVAILABLE, as gRPC keepalive does for a peer that went silent. Busy is not silent: any frame counts as
  an answer, time this side did not read (its loop stalled, or reading paused for a slow relay) is not
  counted against the backend, and the bound is generous (a loaded CPU answers late).

A stream's replies that arrived while the relay was busy are read as one (consecutive text pieces
merged; the first reply always alone, as the backend sends it): the frontend pays per SSE event, not
per token, when its client is slower than the engine.
Reading pauses while more than `BUFFER_HIGH_BYTES` of replies wait for their readers.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import grpc

from corral.config.parse import format_duration_s
from corral.lane import frames
from corral.proto import backend_pb2 as pb
from corral.proto.replies import merge_text_runs

KEEPALIVE_TIMEOUT_KNOB = "CORRAL_BACKEND_KEEPALIVE_TIMEOUT"
LATE_SLACK_S = (
    0.5  # a ping timer this late means this loop did not run: that time is not the backend's silence
)
BUFFER_HIGH_BYTES = 8 << 20
BUFFER_LOW_BYTES = 1 << 20
MERGE_MAX_PIECES = 1024
EOF = grpc.aio.EOF
R = TypeVar("R")


def rpc_error(status: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(status, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


@dataclass(frozen=True)
class Keepalive:
    """Ping every `interval_s` while calls are in flight; fail them after `timeout_s` of silence since a ping."""

    interval_s: float
    timeout_s: float


class LaneRefused(Exception):
    """The backend refused or did not answer the HELLO; the frontend keeps using gRPC."""


class LaneCall(Protocol):
    """What a connection asks of a call it carries: a unary call is forgotten at its first reply."""

    unary: bool
    due_s: float  # loop time past which it fails DEADLINE_EXCEEDED (`expire`); inf: never

    def deliver(self, kind: int, payload: bytes) -> None: ...
    def fail(self, exc: BaseException) -> None: ...
    def expire(self) -> None: ...


def deadline_exceeded() -> grpc.aio.AioRpcError:
    return rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")


class _Carrier(Protocol):
    """What a call asks of the connection that carries it: `LaneConnection` (a unit test's stand-in too; typed as
    a protocol, the compiled module (corral/native.py) does not insist on the class)."""

    loop: asyncio.AbstractEventLoop

    def start(
        self, call: LaneCall, method: frames.Method, request: Any, trace: bytes | None = None
    ) -> int: ...
    def cancel(self, call_id: int) -> None: ...
    def buffered(self, size: int) -> None: ...
    def consumed(self, size: int) -> None: ...


class _UnaryCall(Generic[R]):
    __slots__ = ("_conn", "_id", "_future", "_parse", "due_s")
    unary = True

    def __init__(
        self,
        conn: _Carrier,
        method: frames.Method,
        request: Any,
        timeout: float | None,
        trace: bytes | None = None,
    ) -> None:
        loop = conn.loop
        self._conn, self._parse = conn, method.reply_type.FromString
        self._future: asyncio.Future[R] = loop.create_future()
        self.due_s = math.inf if timeout is None else loop.time() + timeout
        self._id = conn.start(self, method, request, trace)
        self._future.add_done_callback(self._done)

    def __await__(self) -> Generator[Any, None, R]:
        return self._future.__await__()

    def deliver(self, kind: int, payload: bytes) -> None:
        if self._future.done():
            return
        if kind == frames.REPLY:
            self._future.set_result(self._parse(payload))
        else:
            self._future.set_exception(rpc_error(*frames.parse_error(payload)))

    def fail(self, exc: BaseException) -> None:
        if not self._future.done():
            self._future.set_exception(exc)

    def expire(self) -> None:
        self.fail(deadline_exceeded())

    def _done(self, _future: asyncio.Future[R]) -> None:
        self._conn.cancel(self._id)  # no-op once answered

    def cancel(self) -> bool:
        return self._future.cancel()


class _StreamCall:
    __slots__ = (
        "_conn",
        "_id",
        "_replies",
        "_ready",
        "_waiter",
        "_end",
        "_cancelled",
        "_buffered",
        "_started",
    )
    unary = False
    due_s = math.inf  # bounded by its own watchdog (routing/calls.py ReplyStream)

    def __init__(
        self, conn: _Carrier, method: frames.Method, request: Any, trace: bytes | None = None
    ) -> None:
        self._conn = conn
        self._replies: deque[bytes] = deque()  # as received
        self._ready: deque[pb.Reply] = deque()  # parsed, after the merged text they came with
        self._waiter: asyncio.Future[None] | None = None
        self._end: BaseException | object | None = None  # EOF or the AioRpcError that ended the stream
        self._cancelled = False
        self._buffered = 0
        self._started = (
            False  # the first reply is read alone, as the backend sends it: the stream starts at once
        )
        self._id = conn.start(self, method, request, trace)

    def deliver(self, kind: int, payload: bytes) -> None:
        if kind == frames.REPLY:
            self._replies.append(payload)
            self._buffered += len(payload)
            self._conn.buffered(len(payload))
        elif kind == frames.END:
            self._end = EOF
        else:
            self._end = rpc_error(*frames.parse_error(payload))
        self._wake()

    def fail(self, exc: BaseException) -> None:
        if self._end is None:
            self._end = exc
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def read(self) -> Any:
        """The next reply (the text pieces that piled up, as one), `EOF`, or the error that ended the stream."""
        while True:
            if self._cancelled:
                raise asyncio.CancelledError()
            if self._ready:
                return self._ready.popleft()
            if self._replies:
                return self._take()
            if self._end is not None:
                if self._end is EOF:
                    return EOF
                raise self._end  # type: ignore[misc]
            self._waiter = self._conn.loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def _take(self) -> pb.Reply:
        replies = self._replies
        if len(replies) == 1 or not self._started:
            self._started = True
            raw = replies.popleft()
            self._buffered -= len(raw)
            self._conn.consumed(len(raw))
            reply: pb.Reply = pb.Reply.FromString(raw)
            return reply
        size, self._buffered = self._buffered, 0
        self._conn.consumed(size)
        batch = [pb.Reply.FromString(raw) for raw in replies]
        replies.clear()
        merged = merge_text_runs(batch, MERGE_MAX_PIECES)
        self._ready.extend(merged[1:])  # e.g. the final reply (counts) that came with the pieces: read next
        return merged[0]

    def expire(self) -> None:
        pass

    def cancel(self) -> bool:
        if self._cancelled:
            return False
        self._cancelled = True
        self._conn.consumed(self._buffered)
        self._buffered = 0
        self._replies.clear()
        self._ready.clear()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.cancel()
        self._conn.cancel(self._id)
        return True


Metadata = Sequence[tuple[str, str]]
PREDICT, PREDICT_STREAM = frames.METHODS["Predict"], frames.METHODS["PredictStream"]
EMBEDDING, TOKENIZE_STRING = frames.METHODS["Embedding"], frames.METHODS["TokenizeString"]


class LaneConnection(asyncio.Protocol):
    """One backend's fast lane: calls multiplexed by id over one connection."""

    def __init__(self, address: str, keepalive: Keepalive, on_lost: Callable[[LaneConnection], None]) -> None:
        self.address, self._keepalive, self._on_lost = address, keepalive, on_lost
        self.loop = asyncio.get_running_loop()
        self._reader = frames.FrameReader()
        self._transport: asyncio.Transport | None = None
        self._writer: frames.FrameWriter | None = None
        self._calls: dict[int, LaneCall] = {}
        self._ids = itertools.count(1)
        self._welcome: asyncio.Future[None] = self.loop.create_future()
        self._ping_timer: asyncio.TimerHandle | None = None
        self._ping_due_s = 0.0
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._deadline_at_s = math.inf
        self._silent_since_s: float | None = None  # the first ping the backend sent nothing after
        self._buffered = 0
        self._paused = False
        self.closed = False

    # ---- the stub's call shape (routing.backend_caller.BackendCaller) ------------------------
    # `metadata` is gRPC's: the bearer token in it is not sent (HELLO presented it), the W3C trace
    # context in it (`tracing.metadata_for`) travels in a TRACE frame before the CALL.

    def Predict(
        self, request: pb.PredictOptions, *, metadata: Metadata | None = None, timeout: float | None = None
    ) -> _UnaryCall[pb.Reply]:
        return _UnaryCall(self, PREDICT, request, timeout, frames.trace_payload(metadata))

    def Embedding(
        self, request: pb.PredictOptions, *, metadata: Metadata | None = None, timeout: float | None = None
    ) -> _UnaryCall[pb.EmbeddingResult]:
        return _UnaryCall(self, EMBEDDING, request, timeout, frames.trace_payload(metadata))

    def TokenizeString(
        self, request: pb.PredictOptions, *, metadata: Metadata | None = None, timeout: float | None = None
    ) -> _UnaryCall[pb.TokenizationResponse]:
        return _UnaryCall(self, TOKENIZE_STRING, request, timeout, frames.trace_payload(metadata))

    def PredictStream(self, request: pb.PredictOptions, *, metadata: Metadata | None = None) -> _StreamCall:
        return _StreamCall(self, PREDICT_STREAM, request, frames.trace_payload(metadata))

    # ---- connection --------------------------------------------------------------------------

    async def hello(self, token: str, timeout_s: float) -> None:
        """Present the token; raises LaneRefused when the backend refuses it or does not answer in time."""
        assert self._writer is not None
        self._writer.write(frames.frame(frames.HELLO, 0, token.encode("utf-8")))
        try:
            await asyncio.wait_for(asyncio.shield(self._welcome), timeout_s)
        except TimeoutError:
            self.close()
            raise LaneRefused(f"no WELCOME within {format_duration_s(timeout_s)}") from None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._writer = frames.FrameWriter(self._transport)  # type: ignore[arg-type]

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._lost(f"fast lane to {self.address} lost" + (f": {exc}" if exc else ""))

    def _lost(self, why: str) -> None:
        if self.closed:
            return
        self.closed = True
        for timer in (self._ping_timer, self._deadline_timer):
            if timer is not None:
                timer.cancel()
        self._ping_timer = self._deadline_timer = None
        if not self._welcome.done():
            self._welcome.set_exception(LaneRefused(why))
            self._welcome.exception()  # retrieved: nobody may be waiting any more
        calls, self._calls = self._calls, {}
        error = rpc_error(grpc.StatusCode.UNAVAILABLE, why)
        for call in calls.values():
            call.fail(error)
        if self._writer is not None:
            self._writer.close()
        self._on_lost(self)

    def close(self) -> None:
        self._lost(f"fast lane to {self.address} closed")

    def data_received(self, data: bytes) -> None:
        self._silent_since_s = None  # any frame answers the pings: the backend is there
        try:
            received = self._reader.feed(data)
        except frames.FrameTooLarge as exc:
            self._lost(f"fast lane to {self.address}: {exc}")
            return
        calls = self._calls
        for kind, call_id, payload in received:
            if kind == frames.REPLY:
                call = calls.get(call_id)
                if call is not None:
                    if call.unary:
                        del calls[call_id]
                    call.deliver(kind, payload)
            elif kind in (frames.END, frames.ERROR) and call_id:
                call = calls.pop(call_id, None)
                if call is not None:
                    call.deliver(kind, payload)
            elif kind == frames.WELCOME and not self._welcome.done():
                self._welcome.set_result(None)
            elif kind == frames.ERROR:  # id 0: the connection is refused
                status, details = frames.parse_error(payload)
                if not self._welcome.done():
                    self._welcome.set_exception(LaneRefused(f"{status.name}: {details}"))
                self._lost(f"fast lane to {self.address} refused: {status.name}: {details}")
                return

    # ---- calls -------------------------------------------------------------------------------

    def start(self, call: LaneCall, method: frames.Method, request: Any, trace: bytes | None = None) -> int:
        """Send `call` (its CALL frame, after its TRACE frame); its id. Raises UNAVAILABLE when the lane is closed."""
        if self.closed or self._writer is None:
            raise rpc_error(grpc.StatusCode.UNAVAILABLE, f"fast lane to {self.address} closed")
        call_id = next(self._ids) & 0xFFFFFFFF or next(self._ids)
        self._calls[call_id] = call
        if trace is not None:  # the backend's span is the caller's child (a backend without TRACE ignores it)
            self._writer.write(frames.frame(frames.TRACE, call_id, trace))
        self._writer.write(
            frames.frame(frames.CALL, call_id, bytes((method.code,)) + request.SerializeToString())
        )
        if self._ping_timer is None:
            self._next_ping(self.loop.time())
        if call.due_s < self._deadline_at_s:
            self._watch_deadline(call.due_s)
        return call_id

    # One timer for every call's deadline, armed at the earliest one not yet covered: a call that ends before its
    # deadline costs nothing (a uvloop timer armed and cancelled per call measured 4.6 µs); when the timer fires,
    # the calls past due expire and it re-arms for the earliest left, about once per budget under steady load.

    def _watch_deadline(self, due_s: float) -> None:
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        self._deadline_at_s = due_s
        self._deadline_timer = self.loop.call_at(due_s, self._deadlines)

    def _deadlines(self) -> None:
        self._deadline_timer, self._deadline_at_s = None, math.inf
        now_s, next_s = self.loop.time(), math.inf
        for call in list(self._calls.values()):
            if call.due_s <= now_s:
                call.expire()
            elif call.due_s < next_s:
                next_s = call.due_s
        if next_s < math.inf and not self.closed:
            self._watch_deadline(next_s)

    def cancel(self, call_id: int) -> None:
        if self._calls.pop(call_id, None) is not None and self._writer is not None:
            self._writer.write(frames.frame(frames.CANCEL, call_id))

    def _next_ping(self, now_s: float) -> None:
        self._ping_due_s = now_s + self._keepalive.interval_s
        self._ping_timer = self.loop.call_at(self._ping_due_s, self._ping)

    def _ping(self) -> None:
        self._ping_timer = None
        if self.closed or not self._calls:
            self._silent_since_s = None
            return
        now_s = self.loop.time()
        silent_since_s = self._silent_since_s
        if silent_since_s is None or self._paused:  # it answered since the last ping, or we are not reading
            self._silent_since_s = now_s
        else:
            late_s = now_s - self._ping_due_s
            if late_s > LATE_SLACK_S:  # our loop did not run (its answer may be waiting in the socket)
                silent_since_s = self._silent_since_s = silent_since_s + late_s
            if now_s - silent_since_s >= self._keepalive.timeout_s:
                self._lost(
                    f"fast lane to {self.address}: no answer to a keepalive ping within "
                    f"{format_duration_s(self._keepalive.timeout_s)} (raise {KEEPALIVE_TIMEOUT_KNOB})"
                )
                return
        if self._writer is not None:
            self._writer.write(frames.frame(frames.PING, 0))
        self._next_ping(now_s)

    def buffered(self, size: int) -> None:
        self._buffered += size
        if not self._paused and self._buffered > BUFFER_HIGH_BYTES and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()

    def consumed(self, size: int) -> None:
        self._buffered -= size
        if self._paused and self._buffered < BUFFER_LOW_BYTES and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()


def _host(address: str) -> str:
    host = address.rpartition(":")[0]
    return host[1:-1] if host.startswith("[") else host


async def open_lane(
    address: str,
    port: int,
    token: str,
    keepalive: Keepalive,
    timeout_s: float,
    on_lost: Callable[[LaneConnection], None],
) -> LaneConnection:
    """Connect to the lane a backend at `address` (its gRPC HOST:PORT) advertised on `port`, and say HELLO."""
    loop = asyncio.get_running_loop()
    try:
        _, conn = await asyncio.wait_for(
            loop.create_connection(lambda: LaneConnection(address, keepalive, on_lost), _host(address), port),
            timeout_s,
        )
    except (OSError, TimeoutError) as exc:
        raise LaneRefused(f"cannot connect to port {port}: {exc or type(exc).__name__}") from None
    await conn.hello(token, timeout_s)
    return conn
