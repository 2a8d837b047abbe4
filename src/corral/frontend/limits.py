"""Bounded resources per request, enforced before anything else runs (the outermost ASGI layer).

* Body size per route class. A `Content-Length` over the class's limit is refused with 413 without
  reading a byte of the body (and without `100 Continue`): before parsing and before auth, an anonymous
  300 MB POST costs the frontend nothing. A declared length within the limit is passed through untouched
  (the HTTP server delivers no more than it declares), so the inference path pays one header scan. A body
  without one (chunked) is streamed to the app as it arrives, never held here (a 100 MB chunked upload is
  spooled to disk by the multipart parser as a declared one is), and counted: the moment it passes the
  limit the app is told the client left, whatever it answers is dropped, and the client gets the 413.
* Concurrency. Past `max_concurrent_requests` requests in progress on this frontend (streams count
  until they end; health checks never count and are never refused), a request is answered 429 with
  `Retry-After` at once instead of queueing without bound.

Both 413 and 429 name the knob that raises the limit.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

UNCOUNTED_PATHS = frozenset({"/healthz", "/readyz"})  # probes must answer even when the frontend is full
RETRY_AFTER_S = 1
CONCURRENCY_KNOB = "CORRAL_MAX_CONCURRENT_REQUESTS"
FILES_FORM_OVERHEAD_BYTES = 64 << 10  # an upload's multipart framing and `purpose` field around its file


@dataclass(frozen=True)
class BodyLimit:
    """The largest body one class of routes accepts, and the setting that raises it."""

    what: str  # "inference requests (/v1/*)"
    max_bytes: int
    knob: str

    def message(self) -> str:
        return (
            f"request body too large: {self.what} accept at most {self.max_bytes} bytes; "
            f"raise {self.knob} to allow more"
        )


@dataclass(frozen=True)
class RequestLimits:
    inference_body_bytes: int = 16 << 20
    node_api_body_bytes: int = 1 << 20
    model_config_body_bytes: int = 1 << 20
    admin_body_bytes: int = 1 << 20
    max_concurrent_requests: int = 1024
    files_body_bytes: int = (100 << 20) + FILES_FORM_OVERHEAD_BYTES  # CORRAL_FILES_MAX_BYTES + the form

    @classmethod
    def from_settings(cls, settings: Any) -> RequestLimits:
        return cls(
            settings.inference_max_body_bytes,
            settings.node_api_max_body_bytes,
            settings.model_config_max_body_bytes,
            settings.admin_max_body_bytes,
            settings.max_concurrent_requests,
            settings.files_max_bytes + FILES_FORM_OVERHEAD_BYTES,
        )

    def classes(self) -> tuple[tuple[str, BodyLimit], ...]:
        """(path prefix, limit), first match wins; the last entry (prefix "") covers every other route."""
        return (
            (
                "/v1/files",
                BodyLimit("file uploads (/v1/files)", self.files_body_bytes, "CORRAL_FILES_MAX_BYTES"),
            ),
            (
                "/v1/",
                BodyLimit(
                    "inference requests (/v1/*)", self.inference_body_bytes, "CORRAL_INFERENCE_MAX_BODY"
                ),
            ),
            (
                "/api/node/",
                BodyLimit(
                    "worker node API requests (/api/node/*)",
                    self.node_api_body_bytes,
                    "CORRAL_NODE_API_MAX_BODY",
                ),
            ),
            (
                "/api/model-configs",
                BodyLimit(
                    "model config edits (/api/model-configs/*)",
                    self.model_config_body_bytes,
                    "CORRAL_MODEL_CONFIG_MAX_BODY",
                ),
            ),
            ("", BodyLimit("admin and other requests", self.admin_body_bytes, "CORRAL_ADMIN_MAX_BODY")),
        )


class _Metered:
    """A chunked body passed through as it arrives, counted: past `max_bytes` the app receives a disconnect, and
    its answer (to a body it never had whole) is dropped unless it had already started one."""

    def __init__(self, receive: Receive, send: Send, max_bytes: int) -> None:
        self._receive, self._send, self.max_bytes = receive, send, max_bytes
        self.total = 0
        self.exceeded = False
        self.started = False

    async def receive(self) -> Message:
        if self.exceeded:
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] == "http.request":
            self.total += len(message.get("body", b""))
            if self.total > self.max_bytes:
                self.exceeded = True
                return {"type": "http.disconnect"}
        return message

    async def send(self, message: Message) -> None:
        if self.exceeded and not self.started:
            return  # the 413 replaces it
        if message["type"] == "http.response.start":
            self.started = True
        await self._send(message)


def _declared_length(scope: Scope) -> int | None:
    """Content-Length when it alone frames the body; None for chunked (or a length we will not trust)."""
    length = None
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding":
            return None
        if name == b"content-length":
            length = int(value) if value.isdigit() else None
    return length


async def _answer(
    send: Send, status: int, message: str, type_: str, code: str, headers: list[tuple[bytes, bytes]]
) -> None:
    payload = json.dumps({"error": {"message": message, "type": type_, "code": code}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


async def _too_large(send: Send, limit: BodyLimit) -> None:
    # Connection: close — the server drops the connection instead of draining the rest of the body.
    await _answer(
        send, 413, limit.message(), "invalid_request_error", "body_too_large", [(b"connection", b"close")]
    )


class RequestLimitsMiddleware:
    def __init__(self, app: ASGIApp, limits: RequestLimits) -> None:
        self.app, self.limits = app, limits
        self._classes = limits.classes()
        self._direct_max: dict[str, int] = {}
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNCOUNTED_PATHS:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limits.max_concurrent_requests:
            await self._busy(send)
            return
        self.in_flight += 1
        try:
            await self._bounded(scope, receive, send)
        finally:
            self.in_flight -= 1

    def direct_admit(self, scope: Scope) -> int | None:
        """For the inference fast path (frontend/direct_path.py): the request's declared length when this layer
        would pass it straight through (a length within its class's limit, the frontend below its concurrency
        limit); the caller counts it in `in_flight` while it runs. None: this layer's full path, with its answers."""
        if self.in_flight >= self.limits.max_concurrent_requests:
            return None
        declared = _declared_length(scope)
        if declared is None:
            return None
        path = scope["path"]
        max_bytes = self._direct_max.get(path)
        if max_bytes is None:  # the inference table's few paths (the caller asks for no other)
            max_bytes = self._direct_max[path] = self.body_limit(path).max_bytes
        return declared if declared <= max_bytes else None

    def body_limit(self, path: str) -> BodyLimit:
        for prefix, limit in self._classes:
            if path.startswith(prefix):
                return limit
        return self._classes[-1][1]

    async def _bounded(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self.body_limit(scope["path"])
        declared = _declared_length(scope)
        if declared is not None:
            if declared > limit.max_bytes:
                await _too_large(send, limit)
                return
            await self.app(scope, receive, send)
            return
        meter = _Metered(receive, send, limit.max_bytes)
        try:
            await self.app(scope, meter.receive, meter.send)
        except Exception:
            if not meter.exceeded:
                raise
            # the app failed on a body that was cut off (told the client left): the 413 below answers it
        if meter.exceeded and not meter.started:
            await _too_large(send, limit)

    async def _busy(self, send: Send) -> None:
        limit = self.limits.max_concurrent_requests
        await _answer(
            send,
            429,
            f"this frontend is serving its limit of {limit} concurrent requests; retry "
            f"after {RETRY_AFTER_S} s, or raise {CONCURRENCY_KNOB}",
            "rate_limit_error",
            "frontend_busy",
            [(b"retry-after", str(RETRY_AFTER_S).encode())],
        )
