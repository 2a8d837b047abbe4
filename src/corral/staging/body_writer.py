"""Copy a request body into a file with one large buffer, telling a follower hasher what has landed."""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import BinaryIO

from corral.staging.buffer_hasher import BufferHasher
from corral.staging.disk_space import DiskReservation
from corral.staging.following_hasher import FollowingHasher
from corral.staging.http_body import BadBody, BodyCut, RequestBody

RECV_BUFFER_BYTES = 1 << 20


class BodyTooLong(Exception):
    """The body carried more bytes than allowed (upload cap, or the size its Content-Range declared)."""


class DiskFull(Exception):
    """A write failed with ENOSPC; the bytes written before it are still in the file."""


def write_body(
    body: RequestBody,
    file: BinaryIO,
    *,
    limit_bytes: int,
    base_size_bytes: int = 0,
    hasher: FollowingHasher | BufferHasher | None = None,
    on_bytes: Callable[[int], None] | None = None,
    reservation: DiskReservation | None = None,
) -> tuple[int, str | None]:
    """Append ``body`` to ``file``; returns (bytes received, why it was cut or None if complete).

    Every byte received before a cut is written, so a resumable upload can continue after it.
    With a :class:`BufferHasher` the body is received into its buffers (hashed without a re-read);
    a :class:`FollowingHasher` is told how far the file was written.
    Raises :class:`BodyTooLong` past ``limit_bytes``, :class:`DiskFull` on ENOSPC, and
    ``NotEnoughDisk`` when ``reservation`` cannot grow to hold the next bytes.
    """
    pooled = hasher if isinstance(hasher, BufferHasher) else None
    follower = hasher if isinstance(hasher, FollowingHasher) else None
    own = memoryview(bytearray(RECV_BUFFER_BYTES if pooled is None else 0))
    received = 0
    while True:
        index, view = pooled.take() if pooled is not None else (-1, own)
        try:
            count = body.readinto(view)
        except BodyCut as cut:
            return received, str(cut)
        except BadBody as bad:  # what came before the bad framing was well framed: kept, as after a cut
            return received, f"malformed chunked body ({bad}); send a valid chunked body or a Content-Length"
        if count == 0:
            return received, None
        if received + count > limit_bytes:
            raise BodyTooLong(f"more than {limit_bytes} bytes")
        if reservation is not None:
            reservation.admit(count)
        _write_all(file, view[:count])
        if reservation is not None:
            reservation.wrote(count)
        received += count
        if on_bytes is not None:
            on_bytes(count)
        if pooled is not None:
            pooled.give(index, count)
        elif follower is not None:
            follower.advance(base_size_bytes + received)


def _write_all(file: BinaryIO, data: memoryview) -> None:
    written = 0
    try:
        while written < len(data):
            written += file.write(data[written:]) or 0
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise DiskFull(str(exc)) from None
        raise
