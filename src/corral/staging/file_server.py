"""The worker's file server process part: a threaded HTTP/1.1 server on the worker's base port - 1.

Why not the ASGI stack the frontend uses: an upload is a long byte stream, and pushing it through
an event loop message by message costs more CPU than the disk write itself (measured: uvicorn alone
needed ~1.4 s to swallow 1 GiB on loopback, a blocking ``recv_into`` loop ~0.5 s). Here each
connection gets a thread that reads the body with ``recv_into`` into a large buffer and writes it,
while another thread hashes what landed (see :mod:`corral.staging.following_hasher`); downloads go
out with ``sendfile``. The protocol itself (reference §6.4) lives in :mod:`corral.staging.receiver`.

Hostile or broken peers are bounded (:class:`ServerLimits`): at most ``max_connections`` connections
get a thread, later ones are answered ``503`` at once and closed; a request header must arrive whole
within ``header_timeout_s`` (a watchdog shuts the socket, so a byte-per-minute sender is dropped too),
and a body that sends nothing for ``idle_timeout_s`` is cut. ``/v1`` requests are authenticated on
their headers before any body byte is read; a refused client gets its ``401`` and the connection is
closed without reading what it sends.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from opentelemetry.trace import SpanKind

from corral.staging.http_body import BadBody, ChunkedBody, LengthBody, RequestBody
from corral.telemetry import tracing

log = logging.getLogger(__name__)

DEFAULT_MAX_CONNECTIONS = 64
DEFAULT_HEADER_TIMEOUT_S = (
    30.0  # like the reference's ReadHeaderTimeout; also ends idle keep-alive connections
)
DEFAULT_IDLE_TIMEOUT_S = 300.0  # a body that sends nothing for this long is treated as cut (bytes kept)
DRAIN_LIMIT_BYTES = (
    1 << 20
)  # after an early answer, read at most this much of the body to keep the connection
STOP_JOIN_TIMEOUT_S = 10.0
LINGER_S = 2.0  # after answering early, how long to swallow the rest of a body before closing
LINGER_MAX_BYTES = 64 << 20
UNAUTHENTICATED_LINGER_MAX_BYTES = 256 << 10  # what a refused client may still push so it can read its 401
WATCHDOG_MAX_INTERVAL_S = 0.5


@dataclass(frozen=True)
class ServerLimits:
    """Bounds on what one peer can hold; each is a worker setting (see ``config/staging.py``)."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS  # CORRAL_FILE_SERVER_MAX_CONNECTIONS
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S  # CORRAL_FILE_SERVER_HEADER_TIMEOUT
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S  # CORRAL_FILE_SERVER_IDLE_TIMEOUT

    def busy_message(self) -> str:
        return (
            f"the worker's file server already serves {self.max_connections} connections "
            f"(CORRAL_FILE_SERVER_MAX_CONNECTIONS); retry shortly"
        )


@dataclass
class Answer:
    """One HTTP answer: status, JSON or text body, extra headers. ``sendfile`` streams a file instead."""

    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
    sendfile: Path | None = None
    length_bytes: int | None = None  # Content-Length of a HEAD answer (the file's size)

    @classmethod
    def json(cls, status: int, payload: Any, headers: dict[str, str] | None = None) -> Answer:
        # A path that was not UTF-8 (percent-escaped bytes) is quoted back escaped, not a 500.
        body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode(
            "utf-8", "backslashreplace"
        )
        return cls(status, body, headers or {})

    @classmethod
    def error(cls, status: int, message: str, headers: dict[str, str] | None = None) -> Answer:
        return cls.json(status, {"error": message}, headers)

    @classmethod
    def text(cls, status: int, text: str) -> Answer:
        return cls(status, text.encode(), content_type="text/plain; charset=utf-8")


@dataclass
class FileRequest:
    """What a route handler sees of one request."""

    method: str
    path: str  # percent-decoded
    headers: Any  # email.message.Message: case-insensitive .get()
    body: RequestBody

    def header(self, name: str) -> str:
        return (self.headers.get(name) or "").strip()


@dataclass
class TransferStats:
    """Counters for tests and operators: requests per method, body bytes received, and bytes read back
    from disk to hash (a verified upload hashes its receive buffers; reading back is what resumes
    after a restart and HEADs of files changed since their hash was recorded cost)."""

    requests: Counter[str] = field(default_factory=Counter)
    body_bytes_received: int = 0
    hash_read_bytes: int = 0
    connections_refused: int = 0  # over max_connections
    header_timeouts: int = 0  # dropped by the header watchdog
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count_refused(self) -> None:
        with self._lock:
            self.connections_refused += 1

    def count_header_timeout(self) -> None:
        with self._lock:
            self.header_timeouts += 1

    def count_request(self, method: str) -> None:
        with self._lock:
            self.requests[method] += 1

    def count_body_bytes(self, count: int) -> None:
        with self._lock:
            self.body_bytes_received += count

    def count_hash_read_bytes(self, count: int) -> None:
        with self._lock:
            self.hash_read_bytes += count


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        dispatch: Any,
        auth: BearerAuth,
        stats: TransferStats,
        limits: ServerLimits,
    ) -> None:
        self.dispatch, self.auth, self.stats, self.limits = dispatch, auth, stats, limits
        self.connections: set[socket.socket] = set()
        self.header_deadlines: dict[socket.socket, float] = {}  # connections waiting for a request header
        self.connections_lock = threading.Lock()
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().server_bind()

    def process_request(self, request: Any, client_address: Any) -> None:
        """Admit the connection to its own thread, or answer 503 at once when the cap is reached."""
        with self.connections_lock:
            admitted = len(self.connections) < self.limits.max_connections
            if admitted:
                self.connections.add(request)
        if admitted:
            super().process_request(request, client_address)
            return
        self.stats.count_refused()
        _refuse_busy(request, self.limits.busy_message())
        self.shutdown_request(request)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self.connections_lock:
                self.connections.discard(request)
                self.header_deadlines.pop(request, None)

    def await_header(self, connection: socket.socket) -> None:
        with self.connections_lock:
            self.header_deadlines[connection] = time.monotonic() + self.limits.header_timeout_s

    def header_received(self, connection: socket.socket) -> None:
        with self.connections_lock:
            self.header_deadlines.pop(connection, None)

    def watch_headers(self, stop: threading.Event) -> None:
        """Shut connections whose request header did not arrive in time (wakes their blocked read)."""
        interval_s = min(WATCHDOG_MAX_INTERVAL_S, max(0.01, self.limits.header_timeout_s / 4))
        while not stop.wait(interval_s):
            now = time.monotonic()
            with self.connections_lock:
                overdue = [conn for conn, deadline in self.header_deadlines.items() if deadline <= now]
                for connection in overdue:
                    del self.header_deadlines[connection]
            for connection in overdue:
                self.stats.count_header_timeout()
                log.debug(
                    "file server: no complete request header within %.1fs; connection dropped "
                    "(CORRAL_FILE_SERVER_HEADER_TIMEOUT)",
                    self.limits.header_timeout_s,
                )
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def _refuse_busy(connection: socket.socket, message: str) -> None:
    """Best-effort 503 on a fresh connection, never blocking the accept loop."""
    body = json.dumps({"error": message}).encode()
    head = (
        f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
    ).encode()
    try:
        connection.setblocking(False)
        connection.send(head + body)
        connection.shutdown(socket.SHUT_WR)
        connection.recv(64 << 10)  # what already arrived, so closing does not reset the answer away
    except OSError:
        pass


class BearerAuth:
    """Refuses ``/v1/*`` requests without ``Authorization: Bearer <token>`` (constant-time compare)."""

    def __init__(self, token: str, allow_unauthenticated: bool) -> None:
        self.expected = token.encode()
        self.allow_unauthenticated = allow_unauthenticated

    def problem(self, authorization: str) -> str | None:
        if not self.expected:
            if self.allow_unauthenticated:
                return None
            return (
                "this worker has no registration token, so its file server refuses all /v1 requests; "
                "set LOCALAI_REGISTRATION_TOKEN on the worker and frontend (or set allow_unauthenticated "
                "explicitly to serve files without auth)"
            )
        scheme, _, provided = authorization.encode("latin-1", errors="replace").partition(b" ")
        if scheme.lower() != b"bearer" or not provided.strip():
            return "missing 'Authorization: Bearer <registration token>' header"
        if not hmac.compare_digest(provided.strip(), self.expected):
            return "wrong bearer token: it must equal the worker's registration token"
        return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    _wants_continue = False

    def handle_one_request(self) -> None:
        self.connection.settimeout(self.server.limits.header_timeout_s)
        self.server.await_header(self.connection)
        try:
            super().handle_one_request()
        except (TimeoutError, OSError):
            self.close_connection = True  # the header watchdog or the peer ended the connection

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Protocol-level refusals (bad request line, unknown method, ...) as JSON 4xx answers: a
        malformed request is the client's fault, never a 5xx (the stdlib says 501/505 and sends HTML)."""
        status, headers = code, {}
        if code == 501:  # no do_<METHOD>
            status, message = 405, f"method {self.command!r} is not allowed; use GET, HEAD, PUT or POST"
            headers["Allow"] = "GET, HEAD, PUT, POST"
        elif code == 505:
            status = 400
        self.close_connection = True
        self._write(self.command or "GET", Answer.error(status, message or explain or "bad request", headers))

    def handle_expect_100(self) -> bool:
        self._wants_continue = True  # answered when the body is first read
        return True

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("file server %s: " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_HEAD(self) -> None:
        self._serve("HEAD")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_POST(self) -> None:
        self._serve("POST")

    def _send_continue(self) -> None:
        if self._wants_continue:
            self._wants_continue = False
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.wfile.flush()

    def _body(self) -> RequestBody | Answer:
        body: RequestBody
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            body = ChunkedBody(self.rfile, self._send_continue)  # type: ignore[arg-type]
        else:
            raw = (self.headers.get("Content-Length") or "0").strip()
            if not raw.isdigit():
                return Answer.error(400, f"invalid Content-Length {raw!r}")
            body = LengthBody(self.rfile, int(raw), self._send_continue)  # type: ignore[arg-type]
        body.idle_timeout_s = self.server.limits.idle_timeout_s
        return body

    def _serve(self, method: str) -> None:
        self.server.header_received(self.connection)
        self.server.stats.count_request(method)
        path = unquote(urlsplit(self.path).path, errors="surrogateescape")
        refusal = self._auth_answer(path)
        if refusal is not None:  # decided on the headers alone: not one body byte is read
            self.close_connection = True
            self._write(method, refusal)
            if not self._wants_continue:
                self._linger(UNAUTHENTICATED_LINGER_MAX_BYTES)
            return
        body = self._body()
        if isinstance(body, Answer):
            self.close_connection = True
            self._write(method, body)
            return
        self.connection.settimeout(self.server.limits.idle_timeout_s)
        try:
            if tracing.tracer is None or method != "PUT":
                answer = self.server.dispatch(FileRequest(method, path, self.headers, body))
            else:  # an upload joins the trace of the load that sent it
                with tracing.span(
                    "worker.receive_file",
                    {"corral.file": path},
                    kind=SpanKind.SERVER,
                    context=tracing.extract(self.headers.items()),
                ):
                    answer = self.server.dispatch(FileRequest(method, path, self.headers, body))
        except BadBody as exc:  # a route that read the body itself: the client's framing, not our bug
            answer = Answer.error(
                400, f"malformed request body ({exc}); send a valid chunked body or a Content-Length"
            )
        except Exception as exc:  # a bug must answer 500, not kill the connection silently
            log.exception("%s %s failed", method, path)
            answer = Answer.error(500, f"{method} {path} failed on the worker: {exc}")
        linger = False
        if not body.finished:
            # An answer before the whole body was read: keep the connection only if the rest is small
            # and already on its way (no pending 100-continue); else answer, then close gracefully.
            small_rest = not body.started and not self._wants_continue and body.drain(DRAIN_LIMIT_BYTES)
            if not small_rest:
                self.close_connection = True
                linger = not self._wants_continue
        self._write(method, answer)
        if linger:
            self._linger(LINGER_MAX_BYTES)

    def _linger(self, max_bytes: int) -> None:
        """Half-close and discard what the client still sends, so it can read our answer (no RST)."""
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(LINGER_S)
            scratch = bytearray(64 << 10)
            drained = 0
            while drained < max_bytes:
                count = self.connection.recv_into(scratch)
                if not count:
                    break
                drained += count
        except OSError:
            pass

    def _auth_answer(self, path: str) -> Answer | None:
        if path != "/v1" and not path.startswith("/v1/"):
            return None
        problem = self.server.auth.problem(self.headers.get("Authorization") or "")
        if problem is None:
            return None
        return Answer.error(401, problem, {"WWW-Authenticate": "Bearer"})

    def _write(self, method: str, answer: Answer) -> None:
        try:
            self.send_response(answer.status)
            length = answer.length_bytes
            if answer.sendfile is not None:
                length = answer.sendfile.stat().st_size if length is None else length
                answer.content_type = "application/octet-stream"
            self.send_header("Content-Type", answer.content_type)
            self.send_header("Content-Length", str(length if length is not None else len(answer.body)))
            for name, value in answer.headers.items():
                self.send_header(name, value)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if method == "HEAD":
                return
            if answer.sendfile is not None:
                self.wfile.flush()
                if length:  # an empty file has nothing to send (and sendfile refuses a count of 0)
                    with open(answer.sendfile, "rb") as file:
                        self.connection.sendfile(file, 0, length)
            else:
                self.wfile.write(answer.body)
        except OSError as exc:
            self.close_connection = True
            log.debug("file server: could not answer %s %s: %s", method, self.path, exc)


class ThreadedFileServer:
    """Runs a dispatch function ``FileRequest -> Answer`` on a threaded HTTP server."""

    def __init__(
        self,
        dispatch: Any,
        *,
        token: str,
        allow_unauthenticated: bool,
        limits: ServerLimits | None = None,
        stats: TransferStats | None = None,
    ) -> None:
        if not token and allow_unauthenticated:
            log.warning(
                "worker file server runs WITHOUT a registration token: anyone who can reach it can read "
                "and write the models/data/staging dirs; set LOCALAI_REGISTRATION_TOKEN"
            )
        self.dispatch = dispatch
        self.auth = BearerAuth(token, allow_unauthenticated)
        self.stats = stats or TransferStats()  # counted also by the dispatch (bytes read, hashed)
        self.limits = limits or ServerLimits()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._watchdog: threading.Thread | None = None
        self._stop_watchdog = threading.Event()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("file server is not started")
        return int(self._server.server_address[1])

    def start_sync(self, host: str, port: int) -> None:
        try:
            self._server = _Server((host, port), self.dispatch, self.auth, self.stats, self.limits)
        except OSError as exc:
            raise OSError(f"file-server: cannot listen on {host}:{port}: {exc.strerror}") from None
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="file-server", daemon=True
        )
        self._thread.start()
        self._stop_watchdog.clear()
        self._watchdog = threading.Thread(
            target=self._server.watch_headers,
            args=(self._stop_watchdog,),
            name="file-server-headers",
            daemon=True,
        )
        self._watchdog.start()

    def stop_sync(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stop_watchdog.set()
        server.shutdown()
        server.server_close()
        with server.connections_lock:
            connections = list(server.connections)
        for connection in connections:  # wake handler threads blocked on idle keep-alive reads
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in (self._thread, self._watchdog):
            if thread is not None:
                thread.join(STOP_JOIN_TIMEOUT_S)

    async def start(self, host: str, port: int) -> None:
        await asyncio.to_thread(self.start_sync, host, port)

    async def stop(self) -> None:
        await asyncio.to_thread(self.stop_sync)
