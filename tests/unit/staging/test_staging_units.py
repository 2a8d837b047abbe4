"""Pure pieces of staging: Content-Range, disk admission, retry backoff, size settings, body writing."""

from __future__ import annotations

import errno
import hashlib
import io
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from typing_extensions import Buffer

from corral.config.errors import ConfigError
from corral.config.sizes import parse_size_bytes
from corral.staging.body_writer import BodyTooLong, DiskFull, write_body
from corral.staging.buffer_hasher import BufferHasher
from corral.staging.content_range import ContentRange, parse_content_range, parse_status_query
from corral.staging.disk_space import DiskBudget, NotEnoughDisk
from corral.staging.http_body import BodyCut, ChunkedBody, LengthBody
from corral.staging.partial_digests import PartialDigests
from corral.staging.s3 import StorageConfig
from corral.staging.uploader import RetryPolicy
from support.rows import present


@pytest.mark.parametrize(
    "header, parsed",
    [
        ("bytes 0-99/100", ContentRange(0, 99, 100)),  # the whole file
        ("bytes 40-99/100", ContentRange(40, 99, 100)),  # a resumed tail
        (" bytes 0-0/1 ", ContentRange(0, 0, 1)),  # one byte, padded
    ],
)
def test_content_range_parses_start_end_total(header: str, parsed: ContentRange) -> None:
    assert parse_content_range(header) == parsed


@pytest.mark.parametrize(
    "header, message",
    [
        ("0-99/100", "missing 'bytes' prefix"),
        ("bytes 0-99", "expected 'bytes <start>-<end>/<total>'"),
        ("bytes a-b/c", "start, end and total must be integers"),
        ("bytes 50-10/100", "invalid Content-Range range: 50-10/100"),
        ("bytes 0-100/100", "invalid Content-Range range: 0-100/100"),
    ],
)
def test_malformed_content_range_names_the_problem(header: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_content_range(header)


def test_status_query_form_is_recognised_only_with_a_numeric_total() -> None:
    assert parse_status_query("bytes */1000") == 1000
    assert parse_status_query("bytes */x") is None
    assert parse_status_query("bytes 0-1/2") is None


def _budget(free_bytes: int, keep_free: int = 100) -> DiskBudget:
    return DiskBudget(min_free_bytes=keep_free, free_bytes=lambda _path: free_bytes)


@pytest.mark.parametrize("need, fits", [(900, True), (901, False)])  # 1000 free, 100 kept free
def test_disk_budget_admits_only_what_fits_above_the_kept_free_space(
    tmp_path: Path, need: int, fits: bool
) -> None:
    budget = _budget(1000)
    if fits:
        with budget.reserve(tmp_path, need, "key 'k'"):
            pass
    else:
        with (
            pytest.raises(NotEnoughDisk, match="it needs 901 bytes"),
            budget.reserve(tmp_path, need, "key 'k'"),
        ):
            pass


def test_concurrent_reservations_add_up_and_are_released(tmp_path: Path) -> None:
    budget = _budget(1000)
    with budget.reserve(tmp_path, 500, "key 'a'"):
        with pytest.raises(NotEnoughDisk, match=r"\(500 reserved by uploads in progress"):
            with budget.reserve(tmp_path, 500, "key 'b'"):
                pass
        with budget.reserve(tmp_path, 400, "key 'c'"):
            pass
    with budget.reserve(tmp_path, 900, "key 'd'"):
        pass


def test_retry_backoff_doubles_from_the_first_and_is_capped() -> None:
    policy = RetryPolicy(first_backoff_s=1.0, max_backoff_s=5.0)
    assert [policy.backoff_s(n) for n in range(0, 6)] == [0.0, 1.0, 2.0, 4.0, 5.0, 5.0]


@pytest.mark.parametrize(
    "raw, size",
    [
        ("0", 0),
        ("512MiB", 512 << 20),
        ("50GiB", 50 << 30),
        ("1.5GB", 1_500_000_000),
        ("64k", 64_000),
        ("1PiB", 1 << 50),
    ],
)
def test_sizes_in_settings_accept_binary_and_decimal_units(raw: str, size: int) -> None:
    assert parse_size_bytes(raw) == size


@pytest.mark.parametrize("raw", ["", "-1", "5 apples", "1ZB", "i"])
def test_bad_sizes_are_refused_with_an_example(raw: str) -> None:
    with pytest.raises(ValueError, match="use e.g. 512MiB"):
        parse_size_bytes(raw)


def _storage(**overrides: object) -> SimpleNamespace:
    values = dict(
        storage_url="http://s3:9000",
        storage_bucket="localai",
        storage_region="",
        storage_access_key="a",
        storage_secret_key="s",
    )
    return SimpleNamespace(**{**values, **overrides})


def test_storage_config_is_off_without_a_url_and_defaults_the_region() -> None:
    assert StorageConfig.from_settings(_storage(storage_url="")) is None
    assert present(StorageConfig.from_settings(_storage())).region == "us-east-1"


def test_storage_keys_must_be_set_together() -> None:
    with pytest.raises(ConfigError, match="must be set together"):
        StorageConfig.from_settings(_storage(storage_secret_key=""))


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


def test_chunked_body_is_decoded_and_trailers_skipped() -> None:
    raw = b"4\r\nabcd\r\n3;ext=1\r\nefg\r\n0\r\nTrailer: x\r\n\r\n"
    body = ChunkedBody(io.BufferedReader(io.BytesIO(raw)), None)
    buffer = memoryview(bytearray(100))
    out = b""
    while count := body.readinto(buffer):
        out += bytes(buffer[:count])
    assert out == b"abcdefg" and body.finished


def test_chunked_body_cut_between_chunks_is_a_body_cut() -> None:
    body = ChunkedBody(io.BufferedReader(io.BytesIO(b"4\r\nabcd\r\n")), None)
    buffer = memoryview(bytearray(100))
    assert body.readinto(buffer) == 4
    with pytest.raises(BodyCut):
        body.readinto(buffer)


class _Disk:
    """A filesystem of ``capacity`` bytes whose free space shrinks as writes land."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.used = capacity, 0

    def free(self, _path: Path) -> int:
        return self.capacity - self.used


def test_a_reservation_of_unknown_size_grows_with_each_write_until_the_disk_cannot_hold_more(
    tmp_path: Path,
) -> None:
    disk = _Disk(100 << 20)
    budget = DiskBudget(min_free_bytes=10 << 20, free_bytes=disk.free)
    with budget.reserve(tmp_path, 0, "key 'c'") as reservation:
        for _ in range(90):  # 90 MiB fit above the 10 MiB kept free
            reservation.admit(1 << 20)
            disk.used += 1 << 20
            reservation.wrote(1 << 20)
        with pytest.raises(
            NotEnoughDisk, match=r"it needs 94371841 bytes .* has 10485760 bytes free \(0 reserved"
        ):
            reservation.admit(1)
    assert budget._reserved_bytes == {}


def test_written_bytes_leave_the_reservation_so_free_space_is_not_counted_twice(tmp_path: Path) -> None:
    disk = _Disk(1000)
    budget = DiskBudget(min_free_bytes=0, free_bytes=disk.free)
    with budget.reserve(tmp_path, 600, "key 'a'") as first:
        first.admit(600)
        disk.used += 600
        first.wrote(600)
        with budget.reserve(tmp_path, 400, "key 'b'"):  # 400 free, nothing outstanding: fits
            pass


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


def test_partial_digest_is_kept_only_for_the_file_exactly_as_it_was_hashed(tmp_path: Path) -> None:
    path = tmp_path / "part.bin"
    path.write_bytes(b"abc")
    digests = PartialDigests()
    digests.keep(path, hashlib.sha256(b"ab"), 2)  # the file holds a byte the digest did not see
    assert digests.current(path) is None
    digests.keep(path, hashlib.sha256(b"abc"), 3)
    kept = digests.current(path)
    assert kept is not None and kept.hexdigest() == hashlib.sha256(b"abc").hexdigest()
    stat = path.stat()
    with open(path, "r+b") as file:  # same size and inode, new content and mtime: not that file any more
        file.write(b"x")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert digests.current(path) is None
    digests.keep(path, hashlib.sha256(b"xbc"), 3)
    path.unlink()
    assert digests.current(path) is None


def test_partial_digests_forget_the_oldest_past_their_bound(tmp_path: Path) -> None:
    digests = PartialDigests(max_entries=2)
    paths = [tmp_path / f"{i}.bin" for i in range(3)]
    for path in paths:
        path.write_bytes(b"z")
        digests.keep(path, hashlib.sha256(b"z"), 1)
    assert [digests.current(p) is not None for p in paths] == [False, True, True]
