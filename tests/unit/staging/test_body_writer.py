"""staging/body_writer: a request body written to disk within its limit, ENOSPC as DiskFull, hashed as written."""

from __future__ import annotations

import errno
import hashlib
import io
from pathlib import Path

import pytest
from typing_extensions import Buffer

from corral.staging.body_writer import BodyTooLong, DiskFull, write_body
from corral.staging.buffer_hasher import BufferHasher
from corral.staging.http_body import LengthBody


class _FullDisk(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, data: Buffer) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_write_body_maps_enospc_to_disk_full() -> None:
    body = LengthBody(io.BufferedReader(io.BytesIO(b"x" * 10)), 10, None)
    with pytest.raises(DiskFull):
        write_body(body, _FullDisk(), limit_bytes=100)  # type: ignore[arg-type]


def test_write_body_refuses_more_than_the_limit_and_reports_a_cut(tmp_path: Path) -> None:
    with open(tmp_path / "out", "wb") as out:
        long = LengthBody(io.BufferedReader(io.BytesIO(b"x" * 10)), 10, None)
        with pytest.raises(BodyTooLong):
            write_body(long, out, limit_bytes=5)
    with open(tmp_path / "out", "wb") as out:
        cut = LengthBody(io.BufferedReader(io.BytesIO(b"x" * 4)), 10, None)
        received, why = write_body(cut, out, limit_bytes=100)
    assert received == 4 and "connection closed after 4 of 10 body bytes" in str(why)
    assert (tmp_path / "out").read_bytes() == b"xxxx"  # bytes before the cut are kept for a resume


def test_write_body_receives_into_the_buffer_hasher_and_hashes_exactly_what_it_wrote() -> None:
    data = bytes(range(256)) * 20000  # 5 MB: several rounds through the pool
    hasher = BufferHasher(buffer_bytes=64 << 10, buffer_count=2)
    out = io.BytesIO()
    received, cut = write_body(
        LengthBody(io.BytesIO(data), len(data), None), out, limit_bytes=len(data), hasher=hasher
    )
    assert (received, cut) == (len(data), None)
    assert out.getvalue() == data
    assert hasher.finish(len(data)) == hashlib.sha256(data).hexdigest()
