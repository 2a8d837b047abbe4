"""staging/buffer_hasher: buffers hashed in order and reused, a prefix digest continued."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from corral.staging.buffer_hasher import BufferHasher


def test_buffer_hasher_hashes_the_given_buffers_in_order_and_reuses_them(tmp_path: Path) -> None:
    hasher = BufferHasher(buffer_bytes=4, buffer_count=2)
    expected = hashlib.sha256()
    for piece in (b"abcd", b"ef", b"", b"ghij", b"k"):  # more pieces than buffers: they come back to the pool
        index, view = hasher.take()
        view[: len(piece)] = piece
        hasher.give(index, len(piece))
        expected.update(piece)
    assert hasher.finish(11) == expected.hexdigest()


def test_buffer_hasher_refuses_a_size_it_did_not_hash() -> None:
    hasher = BufferHasher(buffer_bytes=4, buffer_count=1)
    index, view = hasher.take()
    view[:3] = b"abc"
    hasher.give(index, 3)
    with pytest.raises(OSError, match="hashed 3 bytes of an upload of 4 bytes"):
        hasher.finish(4)


def test_buffer_hasher_continues_a_prefix_digest_and_settles_to_the_running_digest() -> None:
    prefix = hashlib.sha256(b"0123456789")
    hasher = BufferHasher(buffer_bytes=4, buffer_count=2, prefix=prefix, prefix_bytes=10)
    for piece in (b"abcd", b"ef"):
        index, view = hasher.take()
        view[: len(piece)] = piece
        hasher.give(index, len(piece))
    running = hasher.settle()
    assert hasher.hashed_bytes == 16
    assert running.hexdigest() == hashlib.sha256(b"0123456789abcdef").hexdigest()
    assert hasher.finish(16) == running.hexdigest()  # settle then finish: same digest, nothing hashed twice
    assert prefix.hexdigest() == hashlib.sha256(b"0123456789").hexdigest()  # the seed itself is untouched
