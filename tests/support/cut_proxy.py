"""A TCP proxy that forwards HTTP uploads and can cut the first one after N body bytes.

It counts request body bytes per connection (after the header block), records each request head,
and, when armed, closes both sides of the first upload once ``cut_after_body_bytes`` body bytes went
through -- a connection dropped mid-transfer, as a flaky network or a crashed router would -- or
flips one byte of the first body (``flip_body_byte_at``), as a link that corrupts data would.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field

HEAD_END = b"\r\n\r\n"


@dataclass
class CutProxy:
    upstream_port: int
    cut_after_body_bytes: int | None = None
    flip_body_byte_at: int | None = None  # corrupt this byte of the first request body (a bad link)
    heads: list[bytes] = field(default_factory=list)
    client_bytes: bytearray = field(default_factory=bytearray)  # every byte clients sent (for secret scans)
    body_bytes_forwarded: int = 0
    cuts: int = 0
    flips: int = 0
    _listener: socket.socket | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)

    @property
    def port(self) -> int:
        assert self._listener is not None
        return int(self._listener.getsockname()[1])

    def start(self) -> CutProxy:
        self._listener = socket.create_server(("127.0.0.1", 0))
        thread = threading.Thread(target=self._accept, daemon=True)
        thread.start()
        return self

    def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def _accept(self) -> None:
        assert self._listener is not None
        listener = self._listener
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            threading.Thread(target=self._pump_up, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump_down, args=(upstream, client), daemon=True).start()

    def _pump_down(self, upstream: socket.socket, client: socket.socket) -> None:
        try:
            while data := upstream.recv(1 << 16):
                client.sendall(data)
        except OSError:
            pass
        finally:
            _close(client, upstream)

    def _pump_up(self, client: socket.socket, upstream: socket.socket) -> None:
        buffered = b""
        body_left = 0  # bytes of the current request's body still to forward
        body_seen = 0
        try:
            while data := client.recv(1 << 16):
                with self._lock:
                    self.client_bytes += data
                buffered += data
                while buffered:
                    if body_left == 0:
                        if HEAD_END not in buffered:
                            break
                        head, _, buffered = buffered.partition(HEAD_END)
                        with self._lock:
                            self.heads.append(head)
                        upstream.sendall(head + HEAD_END)
                        body_left, body_seen = _content_length(head), 0
                        continue
                    piece, buffered = buffered[:body_left], buffered[body_left:]
                    piece = self._maybe_flip(self._maybe_cut(piece, body_seen), body_seen)
                    upstream.sendall(piece)
                    body_left -= len(piece)
                    body_seen += len(piece)
                    with self._lock:
                        self.body_bytes_forwarded += len(piece)
                    if self._cut_now(body_seen):
                        return
        except OSError:
            pass
        finally:
            _close(client, upstream)

    def _maybe_cut(self, data: bytes, body_seen: int) -> bytes:
        limit = self.cut_after_body_bytes
        if limit is None or self.cuts:
            return data
        return data[: max(0, limit - body_seen)]

    def _maybe_flip(self, data: bytes, body_seen: int) -> bytes:
        at = self.flip_body_byte_at
        if at is None or self.flips or not body_seen <= at < body_seen + len(data):
            return data
        self.flips += 1
        flipped = bytearray(data)
        flipped[at - body_seen] ^= 0xFF
        return bytes(flipped)

    def _cut_now(self, body_seen: int) -> bool:
        limit = self.cut_after_body_bytes
        if limit is None or self.cuts or body_seen < limit:
            return False
        self.cuts += 1
        return True


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            return int(value.strip())
    return 0


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()
