"""Bearer-token auth for backend gRPC calls (`LOCALAI_GRPC_AUTH_TOKEN`).

When the backend process has the env var set, every call (Health included) must carry metadata
`authorization: Bearer <token>`; anything else is answered `UNAUTHENTICATED` before the
servicer runs. Comparison is constant-time.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import grpc
import grpc.aio

AUTH_TOKEN_ENV = "LOCALAI_GRPC_AUTH_TOKEN"
_BEARER = "bearer "


def auth_token_from_env() -> str | None:
    token = os.environ.get(AUTH_TOKEN_ENV, "")
    return token or None


def _presented_token(metadata: Sequence[tuple[str, str | bytes]] | None) -> str:
    for key, value in metadata or ():
        if key.lower() == "authorization" and isinstance(value, str):
            if value[: len(_BEARER)].lower() == _BEARER:
                return value[len(_BEARER) :].strip()
    return ""


class BearerAuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc ships no types
    """Rejects calls whose `authorization` metadata is not `Bearer <expected token>`."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("BearerAuthInterceptor needs a non-empty token")
        self._expected = token.encode("utf-8")

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        presented = _presented_token(handler_call_details.invocation_metadata).encode("utf-8")
        handler = await continuation(handler_call_details)
        if hmac.compare_digest(presented, self._expected) or handler is None:
            return handler
        detail = (
            "missing bearer token: send metadata 'authorization: Bearer <token>'"
            if not presented
            else "invalid bearer token"
        )
        return _deny(handler, detail)


def _deny(handler: grpc.RpcMethodHandler, detail: str) -> grpc.RpcMethodHandler:
    """A handler of the same shape as `handler` that aborts with UNAUTHENTICATED."""

    async def deny_unary(request: object, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, detail)

    async def deny_stream(request: object, context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, detail)
        yield  # pragma: no cover - unreachable; makes this an async generator

    codecs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(deny_stream, **codecs)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(deny_unary, **codecs)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(deny_stream, **codecs)
    return grpc.unary_unary_rpc_method_handler(deny_unary, **codecs)
