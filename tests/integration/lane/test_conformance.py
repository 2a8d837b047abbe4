"""One conformance suite for both transports of the hot backend RPCs: every behaviour the request path relies
on, run through the `BackendCaller` that `BackendChannels.caller()` returns — the fast lane, and gRPC — against
a real `simulator` backend process (bearer auth on, tracing to a stand-in OTLP collector).

Unary Predict, PredictStream (every token, in order), Embedding, TokenizeString, a refusal's status, cancel
mid-stream (the backend stops), a deadline that expires (the error names its budget and knob), a wrong or
missing token refused, and the caller's trace context arriving at the backend (its span the child of the
frontend's, on the same transport: tracing never switches it). What only the lane has (its framing bounds,
keepalive, a backend without a lane) is in test_fast_lane.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import cast

import grpc
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from corral.lane.client import EOF, Keepalive, LaneConnection, LaneRefused, open_lane
from corral.models.config import ModelConfig
from corral.proto import backend_pb2 as pb
from corral.routing import calls
from corral.routing.backend_caller import BackendCaller
from corral.routing.backend_client import BackendChannels
from corral.routing.errors import BackendTimeout
from corral.routing.local_replicas import LocalReplicas
from corral.routing.pickers.policies import RoutePolicies
from corral.routing.replica import Replica
from corral.routing.router import Router
from corral.telemetry import tracing
from support.backend_processes import Backend, load, running_backend
from support.otlp_collector import Collector, ReceivedSpan

TOKEN = "conformance-token"
PROMPT = "one two three"
SERVICE = "corral-backend-simulator"
MODEL = cast(ModelConfig, SimpleNamespace(name="sim"))
TRANSPORTS = ["lane", "grpc"]


def _request(tokens: int, identity: str = "") -> pb.PredictOptions:
    return pb.PredictOptions(Prompt=PROMPT, Tokens=tokens, ModelIdentity=identity)


@pytest.fixture(scope="module")
def collector() -> Iterator[Collector]:
    with Collector() as started:
        yield started


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory, collector: Collector) -> Iterator[Backend]:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    with running_backend("simulator", tmp_path_factory.mktemp("conformance"), token=TOKEN, **env) as started:
        assert load(started, "sim", Options=["output_token_time_s:0.02"]).success
        yield started


@dataclass
class Transport:
    name: str
    channels: BackendChannels
    address: str

    @property
    def caller(self) -> BackendCaller:
        return self.channels.caller(self.address)

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return self.channels.metadata

    def router(self) -> Router:
        """A router whose one warm replica is this backend (memory only: no database, no bus)."""
        local = LocalReplicas(None, "frontend-1", RoutePolicies())  # type: ignore[arg-type]
        local.view.add(Replica(model="sim", node_id="n1", node_name="node1", address=self.address))
        return Router(SimpleNamespace(channels=self.channels, aliases={}), local, None, None)  # type: ignore[arg-type]


async def _lane_of(channels: BackendChannels, address: str) -> LaneConnection:
    assert not isinstance(channels.caller(address), LaneConnection)  # gRPC until the lane is found
    for _ in range(200):
        found = channels.lane(address)
        if found is not None:
            return found
        await asyncio.sleep(0.02)
    raise AssertionError(f"no fast lane to {address} after 4s")


@pytest.fixture(params=TRANSPORTS)
async def transport(request: pytest.FixtureRequest, backend: Backend) -> AsyncIterator[Transport]:
    over_lane = request.param == "lane"
    channels = BackendChannels(TOKEN, fast_lane=over_lane)
    address = f"127.0.0.1:{backend.port}"
    try:
        if over_lane:
            await _lane_of(channels, address)
        assert isinstance(channels.caller(address), LaneConnection) is over_lane
        yield Transport(request.param, channels, address)
    finally:
        await channels.close()


def _count_in_log(backend: Backend, text: str) -> int:
    return backend.stderr_text().count(text)


async def _logged(backend: Backend, text: str, before: int) -> None:
    """Wait (up to 5 s) until the backend logged `text` once more than `before`."""
    for _ in range(100):
        if _count_in_log(backend, text) > before:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the backend did not log {text!r}")


async def test_unary_predict_answers_as_the_reference(transport: Transport, backend: Backend) -> None:
    reference = backend.stub.Predict(_request(4), timeout=30, metadata=backend.auth())
    reply = await transport.caller.Predict(_request(4), metadata=transport.metadata, timeout=10)
    assert (reply.message, reply.tokens, reply.prompt_tokens) == (reference.message, 4, 3)


async def test_a_stream_carries_every_token_in_order_then_the_counts(
    transport: Transport, backend: Backend
) -> None:
    reference = b"".join(r.message for r in backend.stub.PredictStream(_request(12), metadata=backend.auth()))
    stream = transport.caller.PredictStream(_request(12), metadata=transport.metadata)
    text, final = b"", None
    while (reply := await stream.read()) is not EOF:
        text += reply.message
        final = reply if reply.tokens else final
    assert text == reference and len(text.split()) == 12
    assert final is not None and (final.tokens, final.prompt_tokens) == (12, 3)


async def test_embedding_and_tokenize_answer_as_the_reference(transport: Transport, backend: Backend) -> None:
    request = pb.PredictOptions(Embeddings="the quick brown fox")
    reference = backend.stub.Embedding(request, timeout=30, metadata=backend.auth())
    result = await transport.caller.Embedding(request, metadata=transport.metadata, timeout=10)
    assert list(result.embeddings) == list(reference.embeddings) and len(result.embeddings) > 0
    tokens = await transport.caller.TokenizeString(
        pb.PredictOptions(Prompt=PROMPT), metadata=transport.metadata, timeout=10
    )
    assert tokens.length == 3


async def test_a_refusal_travels_as_the_same_status_unary_and_streamed(transport: Transport) -> None:
    wrong = _request(2, identity="someone-else")
    with pytest.raises(grpc.aio.AioRpcError) as unary:
        await transport.caller.Predict(wrong, metadata=transport.metadata, timeout=10)
    stream = transport.caller.PredictStream(wrong, metadata=transport.metadata)
    with pytest.raises(grpc.aio.AioRpcError) as streamed:
        await stream.read()
    for caught in (unary.value, streamed.value):
        assert caught.code() == grpc.StatusCode.NOT_FOUND
        assert "model identity mismatch" in (caught.details() or "")


async def test_cancelling_a_stream_mid_way_stops_the_generation(
    transport: Transport, backend: Backend
) -> None:
    before = _count_in_log(backend, "PredictStream cancelled by the caller")
    stream = transport.caller.PredictStream(_request(500), metadata=transport.metadata)  # 10 s of tokens
    assert (await stream.read()).message
    stream.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stream.read()
    await _logged(backend, "PredictStream cancelled by the caller", before)
    # the engine is free at once: the next call does not wait for the 500 tokens
    reply = await transport.caller.Predict(_request(2), metadata=transport.metadata, timeout=5)
    assert reply.tokens == 2


async def test_a_deadline_that_expires_names_its_budget_and_the_backend_stops(
    transport: Transport, backend: Backend
) -> None:
    before = _count_in_log(backend, "Predict cancelled by the caller")
    channels = transport.channels
    channels.budgets = dataclasses.replace(channels.budgets, call_timeout_s=0.3)
    with pytest.raises(BackendTimeout) as caught:
        await calls.unary(transport.router(), MODEL, "Predict", _request(200))  # 4 s of tokens
    assert "no answer within 300ms (raise CORRAL_BACKEND_CALL_TIMEOUT)" in str(caught.value)
    assert (
        caught.value.knob == "CORRAL_BACKEND_CALL_TIMEOUT" and not caught.value.dropped
    )  # it answered Health
    await _logged(backend, "Predict cancelled by the caller", before)
    reply = await transport.caller.Predict(_request(2), metadata=transport.metadata, timeout=5)
    assert reply.tokens == 2


async def _refusal(transport: Transport, backend: Backend, token: str) -> tuple[grpc.StatusCode, str]:
    """What a caller presenting `token` is answered: the lane refuses its HELLO, gRPC its call."""
    if transport.name == "lane":
        status = backend.stub.Status(pb.HealthMessage(), timeout=10, metadata=backend.auth())
        with pytest.raises(LaneRefused) as refused:
            keepalive = Keepalive(20.0, 60.0)
            await open_lane(
                transport.address, status.corral_fast_lane_port, token, keepalive, 5.0, lambda _: None
            )
        code, _, details = str(refused.value).partition(": ")
        return grpc.StatusCode[code], details
    stranger = BackendChannels(token, fast_lane=False)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stranger.caller(transport.address).Predict(
                _request(2), metadata=stranger.metadata, timeout=10
            )
        return caught.value.code(), caught.value.details() or ""
    finally:
        await stranger.close()


async def test_a_wrong_or_missing_token_is_refused(transport: Transport, backend: Backend) -> None:
    assert await _refusal(transport, backend, "not-the-token") == (
        grpc.StatusCode.UNAUTHENTICATED,
        "invalid bearer token",
    )
    code, details = await _refusal(transport, backend, "")
    assert code == grpc.StatusCode.UNAUTHENTICATED and details.startswith("missing bearer token")


@pytest.fixture
def traced() -> Iterator[InMemorySpanExporter]:
    """Tracing on in this (the frontend's) process; its spans kept in memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(provider.get_tracer("conformance"))
    try:
        yield exporter
    finally:
        tracing.enable(None)
        provider.shutdown()


async def _backend_spans(collector: Collector, trace_id: str, count: int) -> list[ReceivedSpan]:
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        spans = [s for s in collector.trace(trace_id) if s.service == SERVICE]
        if len(spans) >= count:
            return spans
        await asyncio.sleep(0.05)
    raise AssertionError(f"the backend's spans of trace {trace_id} did not arrive within 10s")


async def test_the_trace_context_arrives_at_the_backend_over_the_same_transport(
    transport: Transport, collector: Collector, traced: InMemorySpanExporter
) -> None:
    router = transport.router()
    with tracing.span("frontend request") as root:
        assert root is not None
        await calls.unary(router, MODEL, "Predict", _request(2))
        first, stream = await calls.open_stream(router, MODEL, _request(3))
        try:
            while await stream.read() is not EOF:
                pass
        finally:
            stream.close()
    assert first.message
    assert isinstance(transport.caller, LaneConnection) is (
        transport.name == "lane"
    )  # still the same transport
    trace_id = f"{root.get_span_context().trace_id:032x}"
    clients = {s.name: s for s in traced.get_finished_spans() if s.name.startswith("backend ")}
    served = {s.name: s for s in await _backend_spans(collector, trace_id, 2)}
    for method in ("Predict", "PredictStream"):
        server, client = served[f"backend.{method}"], clients[f"backend {method}"]
        assert server.parent_span_id == f"{client.context.span_id:016x}"  # the frontend's client span
        assert server.attributes.get("corral.transport") == ("lane" if transport.name == "lane" else None)
