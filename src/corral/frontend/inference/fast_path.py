"""The inference hot path as a plain ASGI layer: POST /v1/{chat/completions,completions,embeddings,rerank}.

It reads the body (already bounded by `limits`, the layer outside it), validates it with the same
pydantic models and calls the same handlers as the FastAPI routes, then sends their Response directly — skipping per-request routing and dependency
injection (~0.5 ms on this hardware). A whole response goes straight to the HTTP server's cycle (`LeanCycle.answer`:
one write) when no layer wraps `send`. Everything else falls through to the FastAPI app.

Each answered request is counted with its latency by model and status (`telemetry.labels`, ~2 µs,
`benchmarks/metrics_overhead.py`); with OpenTelemetry on it is also a server span, the parent of the
backend call's span.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import orjson
from opentelemetry.trace import SpanKind
from pydantic import BaseModel, ValidationError
from starlette.responses import Response

from corral.frontend.errors import (
    APIError,
    api_error_response,
    envelope,
    unexpected_response,
    validation_response,
)
from corral.frontend.inference.disconnect import respond_until_disconnect
from corral.frontend.unavailable import unavailable_response
from corral.runtime.httpguard import LeanCycle
from corral.telemetry import tracing
from corral.telemetry.labels import RequestFigures

log = logging.getLogger(__name__)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Body = TypeVar("Body", bound=BaseModel)


@dataclass(frozen=True)
class InferenceRoute(Generic[Body]):
    """One inference handler: POST `path` with a JSON body validated as `request`, answered by `handler`."""

    path: str
    request: type[Body]
    handler: Callable[[Body], Awaitable[Response]]


_WHOLE = Response.__call__  # a response whose body is in hand (not streamed, not a file)

InferenceTable = Sequence[InferenceRoute[Any]]  # declared once (inference/openai.py `inference_table`)


async def read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b""
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def _model_of(data: Any) -> str:
    """The requested model name, for the metrics' `model` label ("" when the body names none)."""
    model = data.get("model") if isinstance(data, dict) else None
    return model if isinstance(model, str) else ""


class FastPath:
    def __init__(
        self,
        app: Callable[[Scope, Receive, Send], Awaitable[None]],
        table: InferenceTable,
        figures: RequestFigures | None = None,
    ) -> None:
        self.app = app
        self.handlers = {route.path: route for route in table}
        self.figures = figures or RequestFigures(lambda _model: None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler = self.handlers.get(scope.get("path", "")) if scope["type"] == "http" else None
        if handler is None or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        started_s = time.perf_counter()
        await self.respond_to(scope, receive, send, handler, await read_body(receive), started_s)

    async def respond_to(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        handler: InferenceRoute[Any],
        raw: bytes,
        started_s: float,
    ) -> None:
        """Answer one inference request whose body is `raw` (also frontend/direct_path.py's entry)."""
        await self.respond(scope, receive, send, lambda: self._handle(handler, raw), started_s)

    async def respond(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        answer: Callable[[], Awaitable[tuple[Response, str]]],
        started_s: float,
    ) -> None:
        """Send what `answer` gives (the response, the requested model), counted and traced; a client that goes
        away cancels it (also frontend/hot_path.py's, for what a request needs after its first try)."""

        async def respond(send: Send) -> None:
            response, model = await answer()
            try:
                cycle = getattr(send, "__self__", None)  # the HTTP server's own send, not a layer's wrapper
                if not (
                    type(cycle) is LeanCycle
                    and type(response).__call__ is _WHOLE
                    and response.background is None
                    and cycle.answer(response.status_code, response.raw_headers, response.body)
                ):
                    await response(scope, receive, send)  # type: ignore[arg-type]
            finally:  # counted also when the client left mid-stream
                self.figures.observe(model, response.status_code, time.perf_counter() - started_s)
                if tracing.tracer is not None:
                    tracing.annotate({"http.status_code": response.status_code, "corral.model": model})

        if tracing.tracer is None:
            # a gone client cancels the backend call
            await respond_until_disconnect(receive, send, respond, scope)
        else:
            with tracing.span(
                f"POST {scope['path']}",
                {"http.route": scope["path"]},
                kind=SpanKind.SERVER,
                context=tracing.extract(_text_headers(scope)),
            ):
                await respond_until_disconnect(receive, send, respond, scope)

    async def _handle(self, route: InferenceRoute[Any], raw: bytes) -> tuple[Response, str]:
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return Response(
                orjson.dumps(
                    envelope(
                        "request body is not valid JSON; send a JSON object",
                        "invalid_request_error",
                        "invalid_value",
                        "body",
                    )
                ),
                status_code=400,
                media_type="application/json",
            ), ""
        name = _model_of(data)
        try:
            body = route.request.model_validate(data)
        except ValidationError as exc:
            return validation_response(exc), name
        return await answered(lambda: route.handler(body)), name


async def answered(handle: Callable[[], Awaitable[Response]]) -> Response:
    """What `handle` answers, or the error envelope for what it raised (never a traceback to the client)."""
    try:
        return await handle()
    except APIError as exc:
        return api_error_response(exc)
    except Exception as exc:
        down = unavailable_response(exc)  # PostgreSQL / NATS down: 503 naming it and its setting
        if down is not None:
            log.warning("%s", bytes(down.body).decode())
            return down
        return unexpected_response(exc)


def _text_headers(scope: Scope) -> list[tuple[str, str]]:
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers", ())]
