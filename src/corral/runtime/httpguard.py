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
* Size: a request's line and headers together may hold `max_header_bytes`; past it, 431 and close (httptools
  itself takes any number of headers of any size: a fast client could fill memory within the header deadline).
* Connections: past `max_connections` open in this process, a new one gets 503 at once and is closed,
  before a byte of it is read: a client (or a balancer) can tell a full frontend from a dead one, and the
  answer names the knob. It costs one small write per refused connection, nothing is parsed.

The timer covers receiving a request only: it is cancelled when the request is whole, so a long response
(a stream of tokens) is never cut by it, and it restarts with each request of a kept-alive connection
(between requests uvicorn's keep-alive timeout applies). Warm-path cost: two clock reads per request; the
connection's one timer is re-armed about once per header timeout, not per request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Protocol

import httptools
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT, service_unavailable
from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

log = logging.getLogger(__name__)

HEADER_KNOB = "CORRAL_HTTP_HEADER_TIMEOUT"
BODY_KNOB = "CORRAL_HTTP_BODY_TIMEOUT"
CONNECTIONS_KNOB = "CORRAL_MAX_CONNECTIONS"
HEADER_BYTES_KNOB = "CORRAL_HTTP_MAX_HEADER_BYTES"
FD_RESERVE = 256  # descriptors kept for everything but client connections: pools, NATS, backends, files
RETRY_AFTER_S = 1


class GuardCounters(Protocol):
    """What the guard counts (the frontend passes its metric families: `telemetry.families.HTTP_GUARD`)."""

    def refused(self) -> None: ...
    def headers_too_large(self) -> None: ...
    def timed_out(self, phase: str) -> None: ...


class Uncounted:
    """Counts nothing (a server without metrics)."""

    def refused(self) -> None:
        pass

    def headers_too_large(self) -> None:
        pass

    def timed_out(self, phase: str) -> None:
        pass


@dataclass(frozen=True)
class ConnectionLimits:
    """What one client connection may hold: each a frontend setting (config/frontend.py)."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    max_connections: int = 4096
    max_header_bytes: int = 64 << 10
    counters: GuardCounters = field(default_factory=Uncounted)

    @classmethod
    def from_settings(cls, settings: Any, counters: GuardCounters) -> ConnectionLimits:
        return cls(
            settings.http_header_timeout_s,
            settings.http_body_timeout_s,
            settings.max_connections,
            settings.http_max_header_bytes,
            counters,
        )

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
        log.warning(
            "HTTP connection cap %d (%s) needs %d open files, but this process may open %d: capping at "
            "%d connections; raise the open-file limit (ulimit -n) or lower %s",
            self.max_connections,
            CONNECTIONS_KNOB,
            wanted,
            soft,
            capped,
            CONNECTIONS_KNOB,
        )
        return replace(self, max_connections=capped)


class HeadersTooLarge(Exception):
    """Raised from a parser callback: the request's line and headers passed `max_header_bytes`."""


class Phase(Enum):
    """Where a connection is in receiving its current request."""

    FIRST_BYTE = "first_byte"  # connected, nothing received yet
    HEADERS = "headers"
    BODY = "body"
    IDLE = "idle"  # the request is whole (its answer may still be streaming)
    KEPT_ALIVE = "kept_alive"  # answered, nothing pipelined: closed after uvicorn's keep-alive timeout


def _answer(status: bytes, message: str, code: str, extra: bytes = b"") -> bytes:
    body = json.dumps(
        {
            "error": {
                "message": message,
                "type": "invalid_request_error" if status.startswith(b"4") else "server_error",
                "code": code,
            }
        }
    ).encode()
    return (
        b"HTTP/1.1 "
        + status
        + b"\r\ncontent-type: application/json\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\n"
        + extra
        + b"connection: close\r\n\r\n"
        + body
    )


DISCONNECT_KEY = "corral.on_disconnect"  # scope key: the cycle's `on_disconnect` setter (see LeanCycle)


class _Gathered:
    """Stands in for the transport while uvicorn writes the first parts of a response: keeps them (`parts`), to be
    written together by `LeanCycle._flush`; once flushed (`parts` None) it writes through. A close writes what it
    kept first (uvicorn closes a connection that is not kept alive inside the `send` that completes it)."""

    __slots__ = ("transport", "parts")

    def __init__(self, transport: Any) -> None:
        self.transport = transport
        self.parts: list[bytes] | None = []

    def write(self, data: bytes) -> None:
        parts = self.parts
        if parts is None:
            self.transport.write(data)
        else:
            parts.append(data)

    def flush(self) -> None:
        parts, self.parts = self.parts, None
        if parts and not self.transport.is_closing():
            self.transport.write(parts[0] if len(parts) == 1 else b"".join(parts))

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def __getattr__(self, name: str) -> Any:  # is_closing(), …: the real transport's
        return getattr(self.transport, name)


_default_heads: dict[int, tuple[Any, bytes]] = {}


def _default_head(headers: list[tuple[bytes, bytes]]) -> bytes:
    """The status line of a 200 and the server's default headers (its date: uvicorn makes a new list each second)."""
    known = _default_heads.get(id(headers))
    if known is not None and known[0] is headers:
        return known[1]
    head = STATUS_LINE[200] + b"".join(name.lower() + b": " + value + b"\r\n" for name, value in headers)
    if len(_default_heads) >= 8:  # lists of seconds past (each server in the process makes its own)
        _default_heads.clear()
    _default_heads[id(headers)] = (headers, head)
    return head


class LeanCycle(RequestResponseCycle):
    """uvicorn's request/response cycle, built by the protocol below, with four savings, same bytes on the wire:

    * Built cheaply: what does not change per request is the class's, and the event its `receive` waits on is
      made when something first waits (`wake` remembers a wake-up until then): a request answered from
      callbacks (frontend/hot_path.py) never makes one.

    * A whole response the app has in hand (the inference fast path's JSON answers) is written by `answer`:
      one call, no ASGI messages, no coroutine per message.
    * One write per response: the status line and headers of a response of known length are held until its
      body and written with it (uvicorn writes them apart: two syscalls, and two segments with TCP_NODELAY).
      A streamed response (chunked) is held only until the loop's turn ends: its head and every part it sends
      in that turn (a chat's role chunk and first token, the Responses API's opening events) go in one write;
      a head that no part followed goes alone then, so a client waiting on a cold load sees its 200 and headers
      without waiting for the first token.
    * A request that asks to be cancelled when its client leaves (`respond_until_disconnect`, through
      `scope[DISCONNECT_KEY]`) is cancelled by the protocol's `connection_lost`, not by a watcher task
      polling `receive()` (a timer per request and a task for a slow one, ~8 µs)."""

    _gathered: _Gathered | None = None  # the response's first parts, not written yet
    _on_disconnect: Any = None
    _event: asyncio.Event | None = None
    _woken = False  # woken before anything waited (no event yet)
    # uvicorn's per-request defaults, as class attributes (an instance sets its own when one changes)
    disconnected = False
    more_body = True
    response_started = False
    response_complete = False
    chunked_encoding: bool | None = None
    expected_content_length = 0
    body: bytes | bytearray = b""  # type: ignore[assignment]  # the first part as it came (on_body), later ones in a bytearray

    def __init__(self, scope: Any, protocol: GuardedHttpToolsProtocol, keep_alive: bool) -> None:
        # RequestResponseCycle.__init__'s fields, from the protocol that parsed the request
        self.scope = scope
        self.transport = protocol.transport
        self.flow = protocol.flow
        self.logger = protocol.logger
        self.access_logger = protocol.access_logger
        self.access_log = protocol.access_log
        self.default_headers = protocol.server_state.default_headers
        self._completed = protocol.on_response_complete
        self.keep_alive = keep_alive
        self.waiting_for_100_continue = protocol.expect_100_continue
        self.tasks = protocol.tasks  # uvicorn waits for them at shutdown

    @property
    def message_event(self) -> asyncio.Event:
        event = self._event
        if event is None:
            event = self._event = asyncio.Event()
            if self._woken:
                event.set()
        return event

    @message_event.setter
    def message_event(self, event: asyncio.Event) -> None:
        self._event = event

    def wake(self) -> None:
        """`message_event.set()`, without making the event when nothing waits yet."""
        event = self._event
        if event is None:
            self._woken = True
        else:
            event.set()

    def add_body(self, part: bytes) -> None:
        body = self.body
        if not body:
            self.body = part  # one part (the usual request): no copy
        elif type(body) is bytes:
            self.body = bytearray(body) + part
        else:
            body += part

    def start_task(self, app: Any) -> None:
        """Run the ASGI `app` for this request in a task, as uvicorn does (a request answered from callbacks,
        frontend/hot_path.py, that needs to await after all)."""
        self.scope[DISCONNECT_KEY] = self.watch_disconnect  # type: ignore[literal-required]
        task = asyncio.get_running_loop().create_task(self.run_asgi(app))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

    def answer(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes | memoryview) -> bool:
        """The whole response at once, in one write, when nothing was sent yet and writing is not paused (else
        False: send it as ASGI messages). The bytes are those `send` would write for a start and a last body
        message with this status, these headers (a `content-length` among them) and this body."""
        if self.response_started or self.disconnected or self.flow.write_paused:
            return False
        if HEADER_RE.search(b"-".join(name for name, _ in headers)) or HEADER_VALUE_RE.search(
            b"\t".join(value for _, value in headers)
        ):
            return False  # `send` raises on it, as before
        content: list[bytes | memoryview] = [STATUS_LINE[status]]
        length, closing = -1, False
        for name, value in (*self.default_headers, *headers):
            name = name.lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection" and b"close" in value.lower():
                closing = True
            content.extend((name, b": ", value, b"\r\n"))
        if length != len(body):
            return False  # chunked, or a length `send` would refuse: its path
        if closing:
            self.keep_alive = False
        elif not self.keep_alive:
            content.append(b"connection: close\r\n")
        content.extend((b"\r\n", body))
        self._write_whole(status, b"".join(content))
        return True

    def answer_json(self, body: bytes, extra: bytes = b"") -> bool:
        """`answer` for a 200 with a JSON body and the server's own headers (`extra`: more header lines, already
        checked, each ending CRLF): the bytes `answer` would write, without its per-header checks."""
        if self.response_started or self.disconnected or self.flow.write_paused:
            return False
        self._write_whole(
            200,
            b"".join(
                (
                    _default_head(self.default_headers),
                    extra,
                    b"content-length: %d\r\ncontent-type: application/json\r\n" % len(body),
                    b"\r\n" if self.keep_alive else b"connection: close\r\n\r\n",
                    body,
                )
            ),
        )
        return True

    def _write_whole(self, status: int, response: bytes) -> None:
        """Write a whole response (status line to body) and complete the cycle as `send` does after its last body
        message: logged, the waiting reader woken, closed unless kept alive, the next pipelined request started."""
        if self.access_log:
            self.access_logger.info(
                '%s - "%s %s HTTP/%s" %d',
                get_client_addr(self.scope),
                self.scope["method"],
                get_path_with_query_string(self.scope),
                self.scope["http_version"],
                status,
            )
        self.response_started = self.response_complete = True
        self.waiting_for_100_continue = False
        self.transport.write(response)
        self.wake()
        if not self.keep_alive:
            self.transport.close()
        self.on_response()

    def watch_disconnect(self, callback: Any) -> None:
        """Call `callback()` once if the connection is lost before the response is complete (None: stop); at once
        when it already is. Reading resumes, as a pending `receive()` would have it: a large body can leave the
        transport paused (uvicorn's high-water mark), and a paused transport never sees the client's EOF."""
        self._on_disconnect = callback
        if callback is None:
            return
        if self.disconnected:
            self.disconnected_now()
        else:
            self.flow.resume_reading()

    def disconnected_now(self) -> None:
        callback, self._on_disconnect = self._on_disconnect, None
        if callback is not None and not self.response_complete:
            callback()

    async def send(self, message: Any) -> None:
        if self._gathered is not None:  # a part after the start, while the parts are gathered
            try:
                await super().send(message)
            finally:
                if not self.chunked_encoding:  # a response of known length: its head with its first part
                    self._flush()
            return
        if self.response_started or message.get("type") != "http.response.start":
            await super().send(message)
            return
        # the start: the transport is the gatherer until `_flush` (a close by uvicorn, after an error or an
        # unfinished response, goes through it: what was kept is written first)
        self._gathered = self.transport = _Gathered(self.transport)  # type: ignore[assignment]
        try:
            await super().send(message)
        except BaseException:  # refused: nothing kept
            self._flush()
            raise
        if self.chunked_encoding:  # streamed: what it sends in this turn, written when the turn ends
            asyncio.get_running_loop().call_soon(self._flush)

    def on_response(self) -> None:
        """uvicorn's call once the response is complete (inside the `send` of its last part): what is held is
        written before the protocol goes on to a next pipelined request, which may be answered at once."""
        self._flush()
        self._completed()

    def _flush(self) -> None:
        """Write the response's parts kept so far in one write; later ones are written as they come. A streamed
        response's head that no part followed in its turn goes alone: the client sees its status and headers
        without waiting for the first part (a cold load's first token)."""
        gathered, self._gathered = self._gathered, None
        if gathered is not None:
            self.transport = gathered.transport
            gathered.flush()


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the deadlines and the cap above; `limits` is bound by `guarded`.

    An app with a `direct` attribute (frontend/direct_path.py: `route(scope)`, `serve(scope, receive, send,
    chosen)`) is asked, when a request's headers are whole, whether it serves the request itself, without its
    ASGI entry; it gets uvicorn's cycle (LeanCycle), its `receive` and `send`, as an ASGI app would. When it
    `holds` the request (a body small enough that uvicorn never pauses reading it, no `Expect: 100-continue`),
    no task starts until the body is whole: then `take(cycle, chosen)` may answer it from callbacks
    (frontend/hot_path.py), and when it does not, the task starts as before.

    A request only moves a deadline (`_due`, a clock read); the connection's one timer is armed when none is
    pending early enough, and when it fires it re-arms for the current deadline or, the request being whole,
    stops. So a kept-alive connection arms about one timer per header timeout, not one per request: a uvloop
    timer armed and cancelled measured 4.6 µs, a clock read 0.14 µs (this machine, under load)."""

    limits = ConnectionLimits()
    _timer: asyncio.TimerHandle | None = None
    _timer_at = 0.0
    _due = 0.0  # when the request being received must be whole (its headers, then its body); 0.0: none is
    _phase = Phase.FIRST_BYTE
    _header_bytes = 0  # of the request being received: its URL and headers so far
    _oversized = False
    _holding: tuple[LeanCycle, Any, Any] | None = (
        None  # a request the direct path answers once its body is whole
    )

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            self.limits.counters.refused()
            transport.write(self._busy_answer())
            transport.close()
            return
        self._watch(self.loop.time() + self.limits.header_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self._unwatch()
        self._holding = None
        super().connection_lost(exc)
        if isinstance(self.cycle, LeanCycle):
            self.cycle.disconnected_now()

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        lean: LeanCycle = cycle  # type: ignore[assignment]  # on_headers_complete builds LeanCycles
        direct = getattr(app, "direct", None)
        chosen = None if direct is None else direct.route(lean.scope)
        if direct is None or chosen is None:
            lean.scope[DISCONNECT_KEY] = lean.watch_disconnect  # type: ignore[literal-required]
            super()._start_asgi_task(lean, app)
            return
        if direct.holds(chosen, HIGH_WATER_LIMIT) and not lean.waiting_for_100_continue:
            if (
                lean.more_body
            ):  # answered when the body is whole (on_message_complete), without a task if it can
                self._holding = (lean, direct, chosen)
                return
            if direct.take(lean, chosen):
                return
        self._serve_direct(lean, direct, chosen)

    def _serve_direct(self, cycle: LeanCycle, direct: Any, chosen: Any) -> None:
        async def served(scope: Any, receive: Any, send: Any) -> None:
            await direct.serve(scope, receive, send, chosen)

        cycle.start_task(
            served
        )  # uvicorn's own run_asgi: the same answer to an exception or an unfinished response

    # The parser's callbacks are uvicorn 0.54's (httptools_impl.HttpToolsProtocol), inlined with the deadlines and
    # the held requests above; they build a LeanCycle. uvicorn's keep-alive timer is not used (`_due` is).

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()

    def on_message_begin(self) -> None:
        kept_alive = self._phase is Phase.KEPT_ALIVE
        self._phase, self._header_bytes = Phase.HEADERS, 0
        if kept_alive or not self._due:  # a later request (the first keeps the connection's deadline)
            self._watch(self.loop.time() + self.limits.header_timeout_s)
        self.url = b""
        self.expect_100_continue = False
        self.headers = []
        self.scope = {  # type: ignore[typeddict-item]
            "type": "http",
            "asgi": {"version": self.asgi_version, "spec_version": "2.3"},
            "http_version": "1.1",
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,  # type: ignore[typeddict-item]
            "root_path": self.root_path,
            "headers": self.headers,
            "state": self.app_state.copy(),
        }

    def on_url(self, url: bytes) -> None:
        self._count_header_bytes(len(url))
        self.url = self.url + url  # not `+=`: mypyc cannot augment an attribute its Python base declares

    def on_header(self, name: bytes, value: bytes) -> None:  # uvicorn's, with the count (one call per header)
        self._header_bytes += len(name) + len(value)
        if self._header_bytes > self.limits.max_header_bytes:
            self._oversized = True
            raise HeadersTooLarge
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        self.headers.append((name, value))

    def _count_header_bytes(self, size: int) -> None:
        self._header_bytes += size
        if self._header_bytes > self.limits.max_header_bytes:
            self._oversized = True
            raise HeadersTooLarge  # stops the parser; uvicorn answers through send_400_response below

    def on_response_complete(self) -> None:
        """uvicorn's, but the keep-alive timeout is a deadline of the connection's one timer: uvicorn arms a timer
        after every response and cancels it at the next request's first byte (4.6 µs a request)."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
        elif self._phase is Phase.IDLE:  # nothing of a next request received yet
            self._phase = Phase.KEPT_ALIVE
            self._watch(self.loop.time() + self.timeout_keep_alive)

    def send_400_response(self, msg: str) -> None:
        if not self._oversized:
            super().send_400_response(msg)
            return
        self.limits.counters.headers_too_large()
        self.transport.write(
            _answer(
                b"431 Request Header Fields Too Large",
                f"the request's line and headers "
                f"exceed {self.limits.max_header_bytes} bytes; send fewer or shorter "
                f"headers, or raise {HEADER_BYTES_KNOB}",
                "request_header_fields_too_large",
            )
        )
        self.transport.close()

    def on_headers_complete(self) -> None:
        self._phase = Phase.BODY
        self._watch(self.loop.time() + self.limits.body_timeout_s)
        parser, scope = self.parser, self.scope
        http_version = parser.get_http_version()
        scope["method"] = parser.get_method().decode("ascii")
        if http_version != "1.1":
            scope["http_version"] = http_version
        if parser.should_upgrade() and self._should_upgrade():
            return
        parsed_url: Any = httptools.parse_url(self.url)  # Any: its stub types `query` bytes, and it is None
        raw_path = parsed_url.path
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        root = self.root_path
        scope["path"] = root + path
        scope["raw_path"] = root.encode("ascii") + raw_path if root else raw_path
        scope["query_string"] = parsed_url.query or b""
        if self.limit_concurrency is not None and (
            len(self.connections) >= self.limit_concurrency or len(self.tasks) >= self.limit_concurrency
        ):
            app = service_unavailable
            self.logger.warning("Exceeded concurrency limit.")
        else:
            app = self.app
        existing = self.cycle
        self.cycle = cycle = LeanCycle(scope, self, http_version != "1.0" and parser.should_keep_alive())
        if existing is None or existing.response_complete:
            self._start_asgi_task(cycle, app)
        else:  # pipelined: it waits for the answer before it
            self.flow.pause_reading()
            self.pipeline.appendleft((cycle, app))

    # An upgrade (a websocket) has no cycle: it is checked first (compiled, reading None as a LeanCycle raises).

    def on_body(self, body: bytes) -> None:
        if self.parser.should_upgrade() and self._should_upgrade():
            return
        cycle: LeanCycle = self.cycle  # type: ignore[assignment]
        if cycle.response_complete:
            return
        cycle.add_body(body)
        if len(cycle.body) > HIGH_WATER_LIMIT:
            self.flow.pause_reading()
        cycle.wake()

    def on_message_complete(self) -> None:
        self._phase, self._due = Phase.IDLE, 0.0
        if self.parser.should_upgrade() and self._should_upgrade():
            return
        cycle: LeanCycle = self.cycle  # type: ignore[assignment]
        if cycle.response_complete:
            return
        cycle.more_body = False
        cycle.wake()
        held = self._holding
        if held is not None and held[0] is self.cycle:
            self._holding = None
            cycle, direct, chosen = held
            if not direct.take(cycle, chosen):
                self._serve_direct(cycle, direct, chosen)

    def handle_websocket_upgrade(self) -> None:
        self._unwatch()  # the connection is the WebSocket protocol's from here
        super().handle_websocket_upgrade()

    def _watch(self, due: float) -> None:
        self._due = due
        if self._timer is not None and self._timer_at <= due:
            return  # it fires in time, and re-arms for the rest
        self._arm(due)

    def _arm(self, due: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = due
        self._timer = self.loop.call_at(due, self._expired)

    def _unwatch(self) -> None:
        self._due = 0.0
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        if not self._due or self.transport.is_closing():
            return  # the request is whole: no timer until the next one begins
        now = self.loop.time()
        if now < self._due:
            self._arm(self._due)
            return
        if self._phase is Phase.KEPT_ALIVE:  # idle past the keep-alive timeout: closed, as uvicorn does
            self.transport.close()
            return
        cycle = self.cycle
        answering = cycle is not None and cycle.response_started and not cycle.response_complete
        if self._phase is Phase.HEADERS and answering:
            self._watch(
                now + self.limits.header_timeout_s
            )  # a pipelined request: its deadline follows this answer
            return
        self._time_out(answered=cycle is not None and cycle.response_started and self._phase is Phase.BODY)

    def _time_out(self, *, answered: bool) -> None:
        self.limits.counters.timed_out(self._phase.value)
        if self._phase is Phase.HEADERS:
            self.transport.write(
                _answer(
                    b"408 Request Timeout",
                    f"the request's headers did not arrive within "
                    f"{self.limits.header_timeout_s:g}s; send them at once, or raise "
                    f"{HEADER_KNOB}",
                    "request_timeout",
                )
            )
        elif self._phase is Phase.BODY and not answered:
            self.transport.write(
                _answer(
                    b"408 Request Timeout",
                    f"the request's body did not arrive within "
                    f"{self.limits.body_timeout_s:g}s of its headers; raise {BODY_KNOB} "
                    f"for slow uploads",
                    "request_timeout",
                )
            )
        self.transport.close()

    def _busy_answer(self) -> bytes:
        return _answer(
            b"503 Service Unavailable",
            f"this frontend process holds its limit of "
            f"{self.limits.max_connections} open connections; retry shortly, or raise {CONNECTIONS_KNOB}",
            "too_many_connections",
            b"retry-after: %d\r\n" % RETRY_AFTER_S,
        )


def guarded(limits: ConnectionLimits) -> Callable[..., GuardedHttpToolsProtocol]:
    """The protocol factory for uvicorn's `Config(http=...)` (it calls it with the class's arguments), bound to
    `limits`."""

    def protocol(*args: Any, **kwargs: Any) -> GuardedHttpToolsProtocol:
        made = GuardedHttpToolsProtocol(*args, **kwargs)
        made.limits = limits
        return made

    return protocol
