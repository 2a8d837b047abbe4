"""`BackendCaller`: what `BackendChannels.caller(address)` returns — the backend's fast lane
(`corral.lane.client.LaneConnection`) or its gRPC stub (`backend_pb2_grpc.BackendStub`), one call shape.

Both take gRPC-style `metadata` (the bearer token, and the W3C trace context from
`tracing.metadata_for`; the lane sends the token once in its HELLO and the trace context in a TRACE
frame), both fail with `grpc.aio.AioRpcError` and the same status codes, both stop the backend's
generation on `cancel()`. `routing.calls` relies on nothing else, so everything it promises (deadlines,
retry of a vanished replica, error mapping, tracing) holds whichever transport served; the conformance
suite `tests/integration/lane/test_conformance.py` runs the same behaviours against both.

Only the four hot RPCs are here; the other RPCs (`AudioTranscription`, `TTSStream`, …) are gRPC only and
reached through `BackendChannels.stub`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Generator, Sequence
from typing import Any, Protocol, TypeVar

from corral.proto import backend_pb2 as pb

R_co = TypeVar("R_co", covariant=True)
Metadata = Sequence[tuple[str, str]]


class UnaryCall(Protocol[R_co]):
    """An awaitable unary call (`grpc.aio.UnaryUnaryCall` or the lane's)."""

    def __await__(self) -> Generator[Any, None, R_co]: ...

    def cancel(self) -> bool: ...


class StreamCall(Protocol[R_co]):
    """A server stream (`grpc.aio.UnaryStreamCall` or the lane's): `read()` gives the next reply, or
    `grpc.aio.EOF` after the last (grpc types EOF as Any); `cancel()` stops the generation."""

    def read(self) -> Awaitable[R_co]: ...

    def cancel(self) -> bool: ...


class BackendCaller(Protocol):
    def Predict(
        self, request: pb.PredictOptions, *, metadata: Metadata | None = ..., timeout: float | None = ...
    ) -> UnaryCall[pb.Reply]: ...

    def PredictStream(
        self, request: pb.PredictOptions, *, metadata: Metadata | None = ...
    ) -> StreamCall[pb.Reply]: ...

    def Embedding(
        self, request: pb.PredictOptions, *, metadata: Metadata | None = ..., timeout: float | None = ...
    ) -> UnaryCall[pb.EmbeddingResult]: ...

    def TokenizeString(
        self, request: pb.PredictOptions, *, metadata: Metadata | None = ..., timeout: float | None = ...
    ) -> UnaryCall[pb.TokenizationResponse]: ...
