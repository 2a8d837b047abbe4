"""Send one file range as an HTTP/1.1 PUT body with ``sendfile`` (zero-copy), from a worker thread.

httpx streams an upload through the event loop chunk by chunk; on a 2-core machine that costs as
much CPU as the transfer itself. Here the kernel copies the file to the socket. The request carries
``Expect: 100-continue``: a worker that refuses the upload on its headers (401, 413, 507, ...)
answers before any body byte is sent.
"""

from __future__ import annotations

import http.client
import select
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

SENDFILE_PIECE_BYTES = 16 << 20  # progress is reported after each piece
CONNECT_TIMEOUT_S = 30.0
SEND_IDLE_TIMEOUT_S = 300.0  # no byte accepted by the socket for this long = dead connection
CONTINUE_WAIT_S = 5.0  # a server that never answers 100-continue gets the body after this wait
MAX_ANSWER_BYTES = 1 << 20


class SendCut(Exception):
    """The connection failed before an answer arrived (refused, reset, timeout)."""


@dataclass(frozen=True)
class PutAnswer:
    status: int
    reason: str
    headers: dict[str, str]  # lower-case names
    body: bytes


class Cancel:
    """Lets the event loop abort a blocking transfer: closing the socket wakes the thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self.cancelled = False

    def attach(self, sock: socket.socket) -> None:
        with self._lock:
            self._sock = sock
            if self.cancelled:
                sock.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            if self._sock is not None:
                try:
                    self._sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def put_file_range(
    url: str,
    headers: dict[str, str],
    local_path: Path,
    offset_bytes: int,
    count_bytes: int,
    *,
    on_sent: Callable[[int], None] | None = None,
    cancel: Cancel | None = None,
) -> PutAnswer:
    """PUT ``count_bytes`` of ``local_path`` from ``offset_bytes``; ``on_sent(total sent so far)``."""
    parts = urlsplit(url)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    host, port = parts.hostname or "", parts.port or 80
    try:
        sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
    except OSError as exc:
        raise SendCut(f"cannot connect to {host}:{port}: {exc}") from None
    with sock:
        if cancel is not None:
            cancel.attach(sock)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(SEND_IDLE_TIMEOUT_S)
        try:
            return _exchange(
                sock, parts.netloc, target, headers, local_path, offset_bytes, count_bytes, on_sent
            )
        except (OSError, http.client.HTTPException) as exc:
            raise SendCut(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__) from None


def _exchange(
    sock: socket.socket,
    netloc: str,
    target: str,
    headers: dict[str, str],
    local_path: Path,
    offset_bytes: int,
    count_bytes: int,
    on_sent: Callable[[int], None] | None,
) -> PutAnswer:
    lines = [
        f"PUT {target} HTTP/1.1",
        f"Host: {netloc}",
        f"Content-Length: {count_bytes}",
        "Connection: close",
    ]
    if count_bytes > 0:
        lines.append("Expect: 100-continue")
    lines += [f"{name}: {value}" for name, value in headers.items() if name.lower() != "content-length"]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    if count_bytes > 0:
        early = _await_continue(sock)
        if early is not None:
            return early
        with open(local_path, "rb") as file:
            sent = 0
            while sent < count_bytes:
                piece = min(SENDFILE_PIECE_BYTES, count_bytes - sent)
                done = sock.sendfile(file, offset_bytes + sent, piece)
                if done == 0:
                    raise OSError(f"{local_path} ended after {offset_bytes + sent} bytes (it shrank)")
                sent += done
                if on_sent is not None:
                    on_sent(sent)
    return _read_answer(sock)


def _await_continue(sock: socket.socket) -> PutAnswer | None:
    """None once the server says 100 Continue (or stays silent); else its final early answer."""
    readable, _, _ = select.select([sock], [], [], CONTINUE_WAIT_S)
    if not readable:
        return None
    head = sock.recv(32, socket.MSG_PEEK)
    if not head:
        raise OSError("connection closed before an answer")
    if head.startswith(b"HTTP/1.1 100") or head.startswith(b"HTTP/1.0 100"):
        _consume_interim(sock)
        return None
    return _read_answer(sock)


def _consume_interim(sock: socket.socket) -> None:
    data = b""
    while not data.endswith(b"\r\n\r\n"):
        byte = sock.recv(1)
        if not byte or len(data) > 4096:
            raise OSError("malformed 100 Continue answer")
        data += byte


def _read_answer(sock: socket.socket) -> PutAnswer:
    response = http.client.HTTPResponse(sock)
    try:
        response.begin()
        body = response.read(MAX_ANSWER_BYTES)
    finally:
        response.close()
    headers = {name.lower(): value for name, value in response.getheaders()}
    return PutAnswer(response.status, response.reason, headers, body)
