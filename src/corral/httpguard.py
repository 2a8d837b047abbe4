"""Deadlines to receive a request and a cap on open connections, for the embedded HTTP server (uvicorn).

uvicorn closes an idle kept-alive connection (`timeout_keep_alive`) and nothing else: a client that sends
a request line and then a header byte every few seconds holds its connection, a file descriptor, for ever,
and a few thousand such clients hold every descriptor the process has. This protocol (uvicorn's httptools
protocol plus one timer per connection) bounds them:

* Headers: a request's headers must arrive whole within `header_timeout_s` of its first byte (of the
  connection's start, for its first request); past it the client gets 408 and the connection closes. A
  connection that never sent a byte is closed without an answer.
* Body: once the headers arrived, the rest of the request must arrive within `body_timeout_s`; past it,
  408 and close (only close, when the app has already answered).
* Connections: past `max_connections` open in this process, a new one gets 503 at once and is closed,
  before a byte of it is read: a client (or a balancer) can tell a full frontend from a dead one, and the
  answer names the knob. It costs one small write per refused connection, nothing is parsed.

The timer covers receiving a request only: it is cancelled when the request is whole, so a long response
(a stream of tokens) is never cut by it, and it restarts with each request of a kept-alive connection
(between requests uvicorn's keep-alive timeout applies). Warm-path cost: one timer handle armed at a
request's first byte and cancelled when it is whole, and one clock read when its headers are complete.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from corral.telemetry.families import HTTP_CONNECTIONS_REFUSED, HTTP_REQUEST_TIMEOUTS

log = logging.getLogger(__name__)

HEADER_KNOB = "CORRAL_HTTP_HEADER_TIMEOUT"
BODY_KNOB = "CORRAL_HTTP_BODY_TIMEOUT"
CONNECTIONS_KNOB = "CORRAL_MAX_CONNECTIONS"
FD_RESERVE = 256  # descriptors kept for everything but client connections: pools, NATS, backends, files
RETRY_AFTER_S = 1


@dataclass(frozen=True)
class ConnectionLimits:
    """What one client connection may hold: each a frontend setting (config/frontend.py)."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    max_connections: int = 4096

    @classmethod
    def from_settings(cls, settings: Any) -> ConnectionLimits:
        return cls(settings.http_header_timeout_s, settings.http_body_timeout_s, settings.max_connections)

    def within_open_files(self) -> ConnectionLimits:
        """The cap, raised into or lowered to what this process's open-file limit allows (like Go's runtime,
        the soft limit is raised toward the hard one first); a lowered cap is logged with the fix."""
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = self.max_connections + FD_RESERVE
        if soft != resource.RLIM_INFINITY and soft < wanted:
            target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                soft = target
            except (ValueError, OSError):
                pass
        if soft == resource.RLIM_INFINITY or soft >= wanted:
            return self
        capped = max(1, soft - FD_RESERVE)
        log.warning("HTTP connection cap %d (%s) needs %d open files, but this process may open %d: capping at "
                    "%d connections; raise the open-file limit (ulimit -n) or lower %s", self.max_connections,
                    CONNECTIONS_KNOB, wanted, soft, capped, CONNECTIONS_KNOB)
        return replace(self, max_connections=capped)


class Phase(Enum):
    """Where a connection is in receiving its current request."""

    FIRST_BYTE = "first_byte"  # connected, nothing received yet
    HEADERS = "headers"
    BODY = "body"
    IDLE = "idle"  # the request is whole (its answer may still be streaming)


def _answer(status: bytes, message: str, code: str, extra: bytes = b"") -> bytes:
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error" if status.startswith(b"4")
                                 else "server_error", "code": code}}).encode()
    return (b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\ncontent-length: "
            + str(len(body)).encode() + b"\r\n" + extra + b"connection: close\r\n\r\n" + body)


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the deadlines and the cap above; `limits` is bound by `guarded`."""

    limits = ConnectionLimits()
    _deadline: asyncio.TimerHandle | None = None
    _phase = Phase.FIRST_BYTE
    _headers_at = 0.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            HTTP_CONNECTIONS_REFUSED.inc()
            transport.write(self._busy_answer())
            transport.close()
            return
        self._arm(self.limits.header_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._phase = Phase.HEADERS
        if self._deadline is None:
            self._arm(self.limits.header_timeout_s)

    def on_headers_complete(self) -> None:
        self._phase = Phase.BODY
        self._headers_at = now = self.loop.time()
        deadline = self._deadline
        if deadline is not None and deadline.when() > now + self.limits.body_timeout_s:
            self._disarm()  # a body deadline shorter than what is left of the header one
            self._arm(self.limits.body_timeout_s)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._phase = Phase.IDLE
        self._disarm()
        super().on_message_complete()

    def handle_websocket_upgrade(self) -> None:
        self._disarm()  # the connection is the WebSocket protocol's from here
        super().handle_websocket_upgrade()

    def _arm(self, delay_s: float) -> None:
        self._deadline = self.loop.call_later(delay_s, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        answering = cycle is not None and cycle.response_started and not cycle.response_complete
        if self._phase is Phase.HEADERS and answering:
            self._arm(self.limits.header_timeout_s)  # a pipelined request: its deadline starts after this answer
            return
        if self._phase is Phase.BODY:
            left_s = self._headers_at + self.limits.body_timeout_s - self.loop.time()
            if left_s > 0:
                self._arm(left_s)
                return
        self._time_out(answered=cycle is not None and cycle.response_started and self._phase is Phase.BODY)

    def _time_out(self, *, answered: bool) -> None:
        HTTP_REQUEST_TIMEOUTS.labels(self._phase.value).inc()
        if self._phase is Phase.HEADERS:
            self.transport.write(_answer(b"408 Request Timeout", f"the request's headers did not arrive within "
                                         f"{self.limits.header_timeout_s:g}s; send them at once, or raise "
                                         f"{HEADER_KNOB}", "request_timeout"))
        elif self._phase is Phase.BODY and not answered:
            self.transport.write(_answer(b"408 Request Timeout", f"the request's body did not arrive within "
                                         f"{self.limits.body_timeout_s:g}s of its headers; raise {BODY_KNOB} "
                                         f"for slow uploads", "request_timeout"))
        self.transport.close()

    def _busy_answer(self) -> bytes:
        return _answer(b"503 Service Unavailable", f"this frontend process holds its limit of "
                       f"{self.limits.max_connections} open connections; retry shortly, or raise {CONNECTIONS_KNOB}",
                       "too_many_connections", b"retry-after: %d\r\n" % RETRY_AFTER_S)


def guarded(limits: ConnectionLimits) -> type[GuardedHttpToolsProtocol]:
    """The protocol class for uvicorn's `Config(http=...)`, bound to `limits`."""
    return type("GuardedHttpToolsProtocol", (GuardedHttpToolsProtocol,), {"limits": limits})
