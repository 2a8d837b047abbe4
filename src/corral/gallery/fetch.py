"""Reading gallery files from a path or an http(s) URL, bounded in size and time (blocking: use a thread).

Every network read waits at most `timeout_s` (LOCALAI_BACKEND_GALLERY_TIMEOUT): a gallery that
hangs fails with an error naming that knob instead of holding the install forever.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlparse

import httpx

from corral.config.parse import format_duration_s

TIMEOUT_KNOB = "LOCALAI_BACKEND_GALLERY_TIMEOUT (--backend-gallery-timeout)"
CHUNK_BYTES = 1 << 20

ByteProgress = Callable[[int, int], None]  # (bytes so far, total bytes or 0 when unknown)


class FetchError(Exception):
    """A gallery file could not be read; the message names the location and the cause."""


def _is_http(location: str) -> bool:
    return urlparse(location).scheme in ("http", "https")


def _local_path(location: str) -> Path:
    return Path(urlparse(location).path) if location.startswith("file://") else Path(location)


def read_bytes(location: str, max_bytes: int, timeout_s: float) -> bytes:
    """The whole content of `location`, refused once it exceeds `max_bytes`."""
    chunks: list[bytes] = []

    def keep(chunk: bytes) -> None:
        chunks.append(chunk)

    _stream(location, keep, timeout_s, max_bytes, None)
    return b"".join(chunks)


def download(
    location: str, out: BinaryIO, timeout_s: float, max_bytes: int, progress: ByteProgress | None = None
) -> str:
    """Copy `location` into `out`; returns the SHA-256 hex digest of what was written."""
    digest = hashlib.sha256()

    def write(chunk: bytes) -> None:
        digest.update(chunk)
        out.write(chunk)

    _stream(location, write, timeout_s, max_bytes, progress)
    out.flush()
    return digest.hexdigest()


def _stream(
    location: str,
    sink: Callable[[bytes], None],
    timeout_s: float,
    max_bytes: int,
    progress: ByteProgress | None,
) -> None:
    if _is_http(location):
        _stream_http(location, sink, timeout_s, max_bytes, progress)
    else:
        _stream_file(_local_path(location), sink, max_bytes, progress)


def _too_large(location: str, max_bytes: int) -> FetchError:
    return FetchError(f"{location} is larger than {max_bytes} bytes; refused")


def _stream_file(
    path: Path, sink: Callable[[bytes], None], max_bytes: int, progress: ByteProgress | None
) -> None:
    try:
        with open(path, "rb") as fh:
            total = os.fstat(fh.fileno()).st_size
            if total > max_bytes:
                raise _too_large(str(path), max_bytes)
            done = 0
            while chunk := fh.read(CHUNK_BYTES):
                done += len(chunk)
                if done > max_bytes:
                    raise _too_large(str(path), max_bytes)
                sink(chunk)
                if progress:
                    progress(done, total)
    except OSError as exc:
        raise FetchError(f"{path}: {exc.strerror or exc}") from None


def _stream_http(
    url: str, sink: Callable[[bytes], None], timeout_s: float, max_bytes: int, progress: ByteProgress | None
) -> None:
    try:
        with (
            httpx.Client(timeout=timeout_s, follow_redirects=True) as client,
            client.stream("GET", url) as response,
        ):
            if response.status_code != 200:
                raise FetchError(f"{url}: HTTP {response.status_code}")
            total = int(response.headers.get("content-length") or 0)
            if total > max_bytes:
                raise _too_large(url, max_bytes)
            done = 0
            for chunk in response.iter_bytes(CHUNK_BYTES):
                done += len(chunk)
                if done > max_bytes:
                    raise _too_large(url, max_bytes)
                sink(chunk)
                if progress:
                    progress(done, total)
    except httpx.TimeoutException:
        raise FetchError(
            f"{url}: no answer within {format_duration_s(timeout_s)}; raise {TIMEOUT_KNOB}"
        ) from None
    except httpx.HTTPError as exc:
        raise FetchError(f"{url}: {exc}") from None
