"""Server spans for backend calls, children of the caller's span (W3C `traceparent` in gRPC metadata).

Installed only when the backend process has OTLP configured (its worker passes the OTEL_* env on);
otherwise the server has no interceptor and a call costs nothing more.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
from opentelemetry.trace import SpanKind

from corral.telemetry import tracing


class TracingInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc ships no types
    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_streaming:
            return handler
        method = handler_call_details.method.rpartition("/")[2]
        parent = tracing.extract(handler_call_details.invocation_metadata)
        codecs = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        attributes = {"rpc.system": "grpc", "rpc.method": method}
        if handler.response_streaming:
            inner_stream = handler.unary_stream

            async def streamed(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                with tracing.span(f"backend.{method}", attributes, kind=SpanKind.SERVER, context=parent):
                    async for reply in inner_stream(request, context):
                        yield reply

            return grpc.unary_stream_rpc_method_handler(streamed, **codecs)
        inner = handler.unary_unary

        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            with tracing.span(f"backend.{method}", attributes, kind=SpanKind.SERVER, context=parent):
                return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(unary, **codecs)
