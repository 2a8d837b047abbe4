"""Request bodies of the worker file server, read straight from the socket into large buffers.

Two framings: ``Content-Length`` and ``Transfer-Encoding: chunked``. Both expose
``readinto(buffer) -> int`` (0 at the end of the body) and raise :class:`BodyCut` when the client
goes away before the body is complete, so a resumable upload keeps every byte that did arrive.
``Expect: 100-continue`` is answered only when the body is first read, so a request refused on its
headers (401, 413, 507, ...) never makes the client send gigabytes for nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import BinaryIO

MAX_CHUNK_LINE_BYTES = 4096
MAX_TRAILER_LINES = 64


class BodyCut(Exception):
    """The client closed the connection (or stopped sending) before the body was complete."""


class BadBody(Exception):
    """The body framing is malformed (bad chunk size line, missing CRLF)."""


class RequestBody:
    """One request body; ``started`` tells whether any of it was read (keep-alive bookkeeping)."""

    idle_timeout_s: float | None = None  # only to name the budget when a read times out

    def __init__(self, rfile: BinaryIO, send_continue: Callable[[], None] | None) -> None:
        self._rfile = rfile
        self._send_continue = send_continue
        self.started = False
        self.finished = False

    def _idle_cut(self) -> BodyCut:
        budget = f"{self.idle_timeout_s:g}s" if self.idle_timeout_s is not None else "the idle timeout"
        return BodyCut(f"no body byte arrived for {budget} (CORRAL_FILE_SERVER_IDLE_TIMEOUT)")

    def _start(self) -> None:
        if not self.started:
            self.started = True
            if self._send_continue is not None:
                self._send_continue()

    def readinto(self, buffer: memoryview) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def _raw_readinto(self, buffer: memoryview) -> int:
        try:
            count = self._rfile.readinto1(buffer)  # type: ignore[attr-defined]
        except TimeoutError:
            raise self._idle_cut() from None
        except OSError as exc:
            raise BodyCut(f"connection error while reading the body: {exc}") from None
        return count or 0

    def drain(self, limit_bytes: int) -> bool:
        """Read and discard what is left if it is at most ``limit_bytes``; True when the body ended."""
        if self.finished:
            return True
        scratch = memoryview(bytearray(64 << 10))
        drained = 0
        try:
            while drained <= limit_bytes:
                count = self.readinto(scratch)
                if count == 0:
                    return True
                drained += count
        except (BodyCut, BadBody):
            return False
        return False


class LengthBody(RequestBody):
    """A body of exactly ``length_bytes`` bytes."""

    def __init__(self, rfile: BinaryIO, length_bytes: int, send_continue: Callable[[], None] | None) -> None:
        super().__init__(rfile, send_continue)
        self.length_bytes = length_bytes
        self.remaining_bytes = length_bytes
        self.finished = length_bytes == 0

    def readinto(self, buffer: memoryview) -> int:
        if self.remaining_bytes == 0:
            self.finished = True
            return 0
        self._start()
        want = min(len(buffer), self.remaining_bytes)
        count = self._raw_readinto(buffer[:want])
        if count == 0:
            raise BodyCut(
                f"connection closed after {self.length_bytes - self.remaining_bytes} of "
                f"{self.length_bytes} body bytes"
            )
        self.remaining_bytes -= count
        if self.remaining_bytes == 0:
            self.finished = True
        return count


class ChunkedBody(RequestBody):
    """A ``Transfer-Encoding: chunked`` body; trailers are read and ignored."""

    def __init__(self, rfile: BinaryIO, send_continue: Callable[[], None] | None) -> None:
        super().__init__(rfile, send_continue)
        self._chunk_left = 0
        self.received_bytes = 0

    def readinto(self, buffer: memoryview) -> int:
        if self.finished:
            return 0
        self._start()
        if self._chunk_left == 0:
            self._chunk_left = self._next_chunk_size()
            if self._chunk_left == 0:
                self._read_trailers()
                self.finished = True
                return 0
        count = self._raw_readinto(buffer[: min(len(buffer), self._chunk_left)])
        if count == 0:
            raise BodyCut(f"connection closed inside a chunk after {self.received_bytes} body bytes")
        self._chunk_left -= count
        self.received_bytes += count
        if self._chunk_left == 0:
            self._expect_crlf()
        return count

    def _line(self) -> bytes:
        try:
            line = self._rfile.readline(MAX_CHUNK_LINE_BYTES)
        except TimeoutError:
            raise self._idle_cut() from None
        except OSError as exc:
            raise BodyCut(f"connection error while reading a chunk header: {exc}") from None
        if not line:
            raise BodyCut(f"connection closed between chunks after {self.received_bytes} body bytes")
        if not line.endswith(b"\n"):
            raise BadBody("chunk size line is too long or not terminated")
        return line

    def _next_chunk_size(self) -> int:
        line = self._line().split(b";", 1)[0].strip()
        try:
            size = int(line, 16)
        except ValueError:
            raise BadBody(f"invalid chunk size {line[:32]!r}") from None
        if size < 0:
            raise BadBody(f"invalid chunk size {line[:32]!r}")
        return size

    def _expect_crlf(self) -> None:
        if self._line().strip() != b"":
            raise BadBody("chunk data is not followed by CRLF")

    def _read_trailers(self) -> None:
        for _ in range(MAX_TRAILER_LINES):
            if self._line().strip() == b"":
                return
        raise BadBody("too many trailer lines")
