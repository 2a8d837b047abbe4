"""The fast lane's wire format: length-prefixed protobuf frames over one plain TCP connection.

The protocol is written down in `PROTOCOL.md` beside this module (frames, ids, handshake, cancel,
deadlines, keepalive, flow control, errors, versioning). In short: a frame is a 9-byte header —
payload length (uint32), kind (uint8), call id (uint32), big-endian — and the payload:

    HELLO    client → server, first frame, id 0: the bearer token (UTF-8; empty without auth)
    WELCOME  server → client, id 0: the token was accepted
    CALL     client → server: one method byte (`METHODS`), then the serialized request
    CANCEL   client → server: stop the call (the backend stops generating)
    REPLY    server → client: the unary answer, or one message of a stream
    END      server → client: the stream ended without error
    ERROR    server → client: one status-code byte (gRPC's numbering), then the details (UTF-8);
             id 0: the connection is refused (auth) and closes
    PING / PONG  keepalive while calls are in flight
    TRACE    client → server, just before the CALL of the same id: its W3C trace context
             (`traceparent: …` and `tracestate: …` lines); a peer that does not know it ignores it

A payload over `MAX_PAYLOAD_BYTES` (the gRPC limit, 50 MiB; 4 KiB before HELLO) closes the
connection: a hostile peer cannot make either side allocate what the length field claims.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import grpc

from corral.proto import backend_pb2 as pb

HEADER = struct.Struct("!IBI")
MAX_PAYLOAD_BYTES = 50 << 20
MAX_HELLO_BYTES = 4096

MAX_TRACE_BYTES = 4096  # a TRACE payload over this is ignored (a W3C traceparent is 55 bytes)

HELLO, WELCOME, CALL, CANCEL, REPLY, END, ERROR, PING, PONG, TRACE = range(1, 11)
TRACE_KEYS = ("traceparent", "tracestate")  # the W3C trace-context headers, as in gRPC metadata


@dataclass(frozen=True)
class Method:
    name: str
    code: int
    streams: bool
    reply_type: Any  # the reply message class (FromString)


METHODS = {
    m.name: m
    for m in (
        Method("Predict", 1, False, pb.Reply),
        Method("PredictStream", 2, True, pb.Reply),
        Method("Embedding", 3, False, pb.EmbeddingResult),
        Method("TokenizeString", 4, False, pb.TokenizationResponse),
    )
}
METHODS_BY_CODE = {m.code: m for m in METHODS.values()}
STATUS_BY_CODE = {status.value[0]: status for status in grpc.StatusCode}


class FrameTooLarge(ValueError):
    """A header announced more than the allowed payload: the peer is broken or hostile."""


def frame(kind: int, call_id: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(len(payload), kind, call_id) + payload


def error_frame(call_id: int, status: grpc.StatusCode, details: str) -> bytes:
    return frame(ERROR, call_id, bytes((status.value[0],)) + details.encode("utf-8", errors="replace"))


def parse_error(payload: bytes) -> tuple[grpc.StatusCode, str]:
    status = STATUS_BY_CODE.get(payload[0], grpc.StatusCode.UNKNOWN) if payload else grpc.StatusCode.UNKNOWN
    return status, payload[1:].decode("utf-8", errors="replace")


def trace_payload(metadata: Iterable[tuple[str, str]] | None) -> bytes | None:
    """The W3C trace context found in gRPC-style `metadata` pairs as a TRACE payload; None when it has none."""
    lines = None
    for key, value in metadata or ():  # a plain loop: ~0.1 µs for the untraced call's one pair
        if key in TRACE_KEYS:
            lines = f"{key}: {value}" if lines is None else f"{lines}\n{key}: {value}"
    return None if lines is None else lines.encode("utf-8")


def parse_trace(payload: bytes) -> list[tuple[str, str]]:
    """The (header, value) pairs of a TRACE payload (lines `name: value`; a line without a colon is skipped)."""
    pairs = []
    for line in payload.decode("utf-8", errors="replace").split("\n"):
        key, sep, value = line.partition(":")
        if sep:
            pairs.append((key.strip().lower(), value.strip()))
    return pairs


class FrameReader:
    """Splits a byte stream into (kind, call id, payload) frames; `limit` bounds one payload."""

    def __init__(self, limit: int = MAX_PAYLOAD_BYTES) -> None:
        self.limit = limit
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, int, bytes]]:
        """The frames completed by `data`, in order; raises FrameTooLarge (the connection must close)."""
        buffer = self._buffer
        buffer += data
        frames = []
        start, end, size = 0, len(buffer), HEADER.size
        while end - start >= size:
            length, kind, call_id = HEADER.unpack_from(buffer, start)
            if length > self.limit:
                raise FrameTooLarge(f"frame of {length} bytes announced (limit {self.limit})")
            if end - start - size < length:
                break
            body = start + size
            frames.append((kind, call_id, bytes(buffer[body : body + length])))
            start = body + length
        if start:
            del buffer[:start]
        return frames


class FrameWriter:
    """Frames written during one event-loop turn leave in one `transport.write` (one syscall for the calls
    or replies of many requests at once); a frame waits at most until the loop's next turn."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport: asyncio.Transport | None = transport
        self._loop = asyncio.get_running_loop()
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        if pending and self._transport is not None and not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        """Write what is pending, then close the transport (it sends its buffer first)."""
        self.flush()
        if self._transport is not None:
            self._transport.close()
            self._transport = None
