"""The worker's file server process part: a threaded HTTP/1.1 server on the worker's base port - 1.

Why not the ASGI stack the frontend uses: an upload is a long byte stream, and pushing it through
an event loop message by message costs more CPU than the disk write itself (measured: uvicorn alone
needed ~1.4 s to swallow 1 GiB on loopback, a blocking ``recv_into`` loop ~0.5 s). Here each
connection gets a thread that reads the body with ``recv_into`` into a large buffer and writes it,
while another thread hashes what landed (see :mod:`corral.staging.following_hasher`); downloads go
out with ``sendfile``. The protocol itself (reference §6.4) lives in :mod:`corral.staging.receiver`.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import socket
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from corral.staging.http_body import ChunkedBody, LengthBody, RequestBody

log = logging.getLogger(__name__)

HEADER_TIMEOUT_S = 30.0  # like the reference's ReadHeaderTimeout; also closes idle keep-alive connections
BODY_IDLE_TIMEOUT_S = 600.0  # a body that sends nothing for this long is treated as cut (bytes kept)
DRAIN_LIMIT_BYTES = 1 << 20  # after an early answer, read at most this much of the body to keep the connection
STOP_JOIN_TIMEOUT_S = 10.0
LINGER_S = 2.0  # after answering early, how long to swallow the rest of a body before closing
LINGER_MAX_BYTES = 64 << 20


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
        body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
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
    """Counters for tests and operators: requests per method and body bytes received."""

    requests: Counter[str] = field(default_factory=Counter)
    body_bytes_received: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count_request(self, method: str) -> None:
        with self._lock:
            self.requests[method] += 1

    def count_body_bytes(self, count: int) -> None:
        with self._lock:
            self.body_bytes_received += count


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], dispatch: Any, auth: BearerAuth, stats: TransferStats) -> None:
        self.dispatch, self.auth, self.stats = dispatch, auth, stats
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().server_bind()


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
    timeout = HEADER_TIMEOUT_S
    server: _Server
    _wants_continue = False

    def setup(self) -> None:
        super().setup()
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        with self.server.connections_lock:
            self.server.connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def handle_expect_100(self) -> bool:
        self._wants_continue = True  # answered when the body is first read
        return True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
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
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            return ChunkedBody(self.rfile, self._send_continue)  # type: ignore[arg-type]
        raw = (self.headers.get("Content-Length") or "0").strip()
        if not raw.isdigit():
            return Answer.error(400, f"invalid Content-Length {raw!r}")
        return LengthBody(self.rfile, int(raw), self._send_continue)  # type: ignore[arg-type]

    def _serve(self, method: str) -> None:
        self.server.stats.count_request(method)
        path = unquote(urlsplit(self.path).path, errors="surrogateescape")
        body = self._body()
        if isinstance(body, Answer):
            self.close_connection = True
            self._write(method, body)
            return
        answer = self._auth_answer(path)
        if answer is None:
            self.connection.settimeout(BODY_IDLE_TIMEOUT_S)
            try:
                answer = self.server.dispatch(FileRequest(method, path, self.headers, body))
            except Exception as exc:  # a bug must answer 500, not kill the connection silently
                log.exception("%s %s failed", method, path)
                answer = Answer.error(500, f"{method} {path} failed on the worker: {exc}")
            finally:
                self.connection.settimeout(HEADER_TIMEOUT_S)
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
            self._linger()

    def _linger(self) -> None:
        """Half-close and discard what the client still sends, so it can read our answer (no RST)."""
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(LINGER_S)
            scratch = bytearray(256 << 10)
            drained = 0
            while drained < LINGER_MAX_BYTES:
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
                with open(answer.sendfile, "rb") as file:
                    self.connection.sendfile(file, 0, length)
            else:
                self.wfile.write(answer.body)
        except OSError as exc:
            self.close_connection = True
            log.debug("file server: could not answer %s %s: %s", method, self.path, exc)


class ThreadedFileServer:
    """Runs a dispatch function ``FileRequest -> Answer`` on a threaded HTTP server."""

    def __init__(self, dispatch: Any, *, token: str, allow_unauthenticated: bool) -> None:
        if not token and allow_unauthenticated:
            log.warning(
                "worker file server runs WITHOUT a registration token: anyone who can reach it can read "
                "and write the models/data/staging dirs; set LOCALAI_REGISTRATION_TOKEN"
            )
        self.dispatch = dispatch
        self.auth = BearerAuth(token, allow_unauthenticated)
        self.stats = TransferStats()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("file server is not started")
        return int(self._server.server_address[1])

    def start_sync(self, host: str, port: int) -> None:
        try:
            self._server = _Server((host, port), self.dispatch, self.auth, self.stats)
        except OSError as exc:
            raise OSError(f"file-server: cannot listen on {host}:{port}: {exc.strerror}") from None
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="file-server", daemon=True)
        self._thread.start()

    def stop_sync(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        with server.connections_lock:
            connections = list(server.connections)
        for connection in connections:  # wake handler threads blocked on idle keep-alive reads
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(STOP_JOIN_TIMEOUT_S)

    async def start(self, host: str, port: int) -> None:
        await asyncio.to_thread(self.start_sync, host, port)

    async def stop(self) -> None:
        await asyncio.to_thread(self.stop_sync)
