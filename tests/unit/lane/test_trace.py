"""The trace context on the fast lane: the client sends the W3C context of a call's metadata in a TRACE frame
before its CALL, the server opens the call's span as that context's child, and a call without one (an older
client, tracing off, a TRACE for another id) is served as before, as a root span (no socket, no backend)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from corral.lane import frames
from corral.lane.client import Keepalive, LaneConnection
from corral.lane.server import _Connection
from corral.proto import backend_pb2 as pb

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
AUTH = ("authorization", "Bearer t")


class _Transport:
    """Collects what a connection writes."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def frames(self) -> list[tuple[int, int, bytes]]:
        return frames.FrameReader().feed(bytes(self.written))


def test_the_trace_headers_of_grpc_metadata_make_the_trace_payload_and_back() -> None:
    metadata = (AUTH, ("traceparent", TRACEPARENT), ("tracestate", "vendor=a:b"))
    payload = frames.trace_payload(metadata)
    assert payload == f"traceparent: {TRACEPARENT}\ntracestate: vendor=a:b".encode()
    assert frames.parse_trace(payload) == [("traceparent", TRACEPARENT), ("tracestate", "vendor=a:b")]
    assert frames.trace_payload((AUTH,)) is None and frames.trace_payload(None) is None
    assert frames.parse_trace(b"no colon\n") == []


async def test_the_client_sends_the_trace_frame_just_before_the_call_of_the_same_id() -> None:
    conn = LaneConnection("127.0.0.1:1", Keepalive(20.0, 60.0), lambda _: None)
    transport = _Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    conn.Predict(pb.PredictOptions(Prompt="plain"), metadata=(AUTH,))
    conn.PredictStream(pb.PredictOptions(Prompt="traced"), metadata=(AUTH, ("traceparent", TRACEPARENT)))
    await asyncio.sleep(0)  # the writer flushes on the loop's next turn
    sent = [(kind, call_id) for kind, call_id, _ in transport.frames()]
    assert sent == [(frames.CALL, 1), (frames.TRACE, 2), (frames.CALL, 2)]
    assert transport.frames()[1][2] == f"traceparent: {TRACEPARENT}".encode()
    assert b"Bearer" not in transport.written  # the token went in HELLO, not with each call
    conn.close()


class _Servicer:
    async def Predict(self, request: pb.PredictOptions, context: Any) -> pb.Reply:
        return pb.Reply(message=request.Prompt.encode())

    async def PredictStream(self, request: pb.PredictOptions, context: Any) -> AsyncIterator[pb.Reply]:
        yield pb.Reply(message=request.Prompt.encode())


async def _served(*sent: bytes) -> list[tuple[int, int, bytes]]:
    """Feed a server connection HELLO and `sent`; the frames it answered after WELCOME, once its calls ended."""
    calls: set[asyncio.Task[None]] = set()
    server = _Connection(_Servicer(), None, calls, set())
    transport = _Transport()
    server.connection_made(transport)  # type: ignore[arg-type]
    server.data_received(frames.frame(frames.HELLO, 0) + b"".join(sent))
    await asyncio.gather(*calls)
    await asyncio.sleep(0)
    server.connection_lost(None)
    welcome, *answered = transport.frames()
    assert welcome == (frames.WELCOME, 0, b"")
    return answered


def _call(call_id: int, method: str, prompt: str) -> bytes:
    request = pb.PredictOptions(Prompt=prompt).SerializeToString()
    return frames.frame(frames.CALL, call_id, bytes((frames.METHODS[method].code,)) + request)


def _trace(call_id: int) -> bytes:
    return frames.frame(frames.TRACE, call_id, f"traceparent: {TRACEPARENT}".encode())


def _parent_of(span: ReadableSpan) -> str | None:
    return None if span.parent is None else f"{span.parent.span_id:016x}"


async def test_the_servers_span_is_the_child_of_the_trace_sent_with_the_call(
    spans: InMemorySpanExporter,
) -> None:
    answered = await _served(
        _trace(1),
        _call(1, "Predict", "traced"),
        _call(2, "Predict", "untraced"),  # an older client: no TRACE
        _trace(9),  # a TRACE for another id is not this call's
        _call(3, "PredictStream", "other"),
    )
    assert [(kind, call_id) for kind, call_id, _ in answered if kind != frames.REPLY] == [(frames.END, 3)]
    assert sorted(call_id for kind, call_id, _ in answered if kind == frames.REPLY) == [1, 2, 3]
    finished = spans.get_finished_spans()
    assert {s.name for s in finished} == {"backend.Predict", "backend.PredictStream"}
    assert all(s.attributes is not None and s.attributes["corral.transport"] == "lane" for s in finished)
    parents = sorted((_parent_of(s) or "-") for s in finished)
    assert parents == ["-", "-", TRACEPARENT.split("-")[2]]
    traced = next(s for s in finished if s.parent is not None)
    assert f"{traced.context.trace_id:032x}" == TRACEPARENT.split("-")[1]


async def test_without_tracing_a_trace_frame_is_accepted_and_changes_nothing() -> None:
    answered = await _served(_trace(1), _call(1, "Predict", "hi"))
    assert answered == [(frames.REPLY, 1, pb.Reply(message=b"hi").SerializeToString())]


async def test_an_unknown_method_is_unimplemented_as_over_grpc() -> None:
    [(kind, call_id, payload)] = await _served(frames.frame(frames.CALL, 4, b"\x7f"))
    assert (kind, call_id) == (frames.ERROR, 4)
    assert frames.parse_error(payload) == (grpc.StatusCode.UNIMPLEMENTED, "unknown fast lane method")
