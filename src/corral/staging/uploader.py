"""Frontend side of file staging: push a local file to a worker's file server (reference §6.4 client).

Protocol per file:

1. Hash the local file (cached in a local ``<file>.sha256`` sidecar).
2. ``HEAD /v1/files/<key>``: if the worker already has a file with the same ``X-Content-SHA256``,
   skip the upload and return its ``X-Local-Path``. If it has a partial upload whose
   ``X-Target-SHA256`` is our hash, resume from its ``X-File-Size``.
3. ``PUT`` the rest, streamed in 1 MiB chunks, with ``X-Content-SHA256`` and
   ``Content-Range: bytes <offset>-<size-1>/<size>``; the worker verifies the hash before answering
   ``200 {"local_path": ...}``.

Transient failures (connection refused/reset, timeouts, 308/416 from the resume protocol) are retried
with capped exponential backoff, HEAD-ing again first so a dropped upload resumes where it stopped.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx

from corral.staging.errors import StagingFailed
from corral.staging.hashing import cached_sha256, is_sha256_hex
from corral.staging.keys import validate_key
from corral.staging.receiver import (
    HEADER_CONTENT_SHA256,
    HEADER_FILE_SIZE,
    HEADER_LOCAL_PATH,
    HEADER_TARGET_SHA256,
)

log = logging.getLogger(__name__)

UPLOAD_CHUNK_BYTES = 1 << 20
# The worker may hash a large uncached file before answering HEAD, and re-hashes the whole file
# before answering the last resumable PUT: allow minutes for a response, but bound it.
HEAD_TIMEOUT = httpx.Timeout(connect=30.0, read=1800.0, write=60.0, pool=60.0)
PUT_TIMEOUT = httpx.Timeout(connect=30.0, read=1800.0, write=300.0, pool=60.0)
# Statuses of the resume protocol that mean "HEAD again and continue", not "give up".
RETRYABLE_STATUSES = frozenset({308, 416})
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
)

ProgressCallback = Callable[[int, int], None]
"""Called as ``on_progress(bytes_sent, total_bytes)``."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry transient failures of one file's upload."""

    max_attempts: int = 5
    first_backoff_s: float = 1.0
    max_backoff_s: float = 30.0

    def backoff_s(self, attempt: int) -> float:
        """Sleep before ``attempt`` (1-based): 0, then first_backoff_s doubling up to max_backoff_s."""
        if attempt <= 1:
            return 0.0
        return min(self.first_backoff_s * 2 ** (attempt - 2), self.max_backoff_s)


DEFAULT_RETRY_POLICY = RetryPolicy()


@dataclass(frozen=True)
class RemoteFile:
    """What ``HEAD`` says the worker holds under a key."""

    size_bytes: int
    local_path: str
    content_sha256: str | None
    target_sha256: str | None


class _Retryable(Exception):
    """One attempt failed in a way that the next attempt may fix."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def file_url(base_url: str, key: str) -> str:
    """URL of ``key`` on a worker file server, e.g. ``http://10.0.0.5:50050/v1/files/models/x/m.gguf``."""
    return f"{base_url.rstrip('/')}/v1/files/{quote(key, safe='/')}"


async def stage_file(
    client: httpx.AsyncClient,
    base_url: str,
    key: str,
    local_path: Path,
    token: str,
    *,
    on_progress: ProgressCallback | None = None,
    retry_policy: RetryPolicy = DEFAULT_RETRY_POLICY,
    resumable: bool = True,
) -> str:
    """Make the worker at ``base_url`` hold ``local_path`` under ``key``; return the worker's path.

    Raises :class:`StagingFailed` when the worker refuses the file or stays unreachable after
    ``retry_policy.max_attempts`` attempts, and ``KeyEscapesDirectory`` for a malformed key.
    ``resumable=False`` sends one plain PUT per attempt (no ``Content-Range``; always from byte 0).
    """
    validate_key(key)
    upload = _FileUpload(client, base_url, key, Path(local_path), token, on_progress)
    size_bytes, local_hash = await upload.describe_local_file()
    last_failure = _Retryable(None, "no attempt was made")
    for attempt in range(1, retry_policy.max_attempts + 1):
        await asyncio.sleep(retry_policy.backoff_s(attempt))
        try:
            remote = await upload.head()
            if remote is not None and remote.content_sha256 == local_hash and remote.local_path:
                upload.report(size_bytes, size_bytes)
                log.info("worker %s already has %s as %s; upload skipped", base_url, key, remote.local_path)
                return remote.local_path
            offset_bytes = _resume_offset(remote, local_hash, size_bytes) if resumable else 0
            return await upload.put(size_bytes, local_hash, offset_bytes, resumable=resumable)
        except _Retryable as failure:
            last_failure = failure
            log.warning(
                "staging %s to %s: attempt %d/%d failed: %s",
                key,
                base_url,
                attempt,
                retry_policy.max_attempts,
                failure.message,
            )
    raise upload.failed(
        last_failure.status, f"gave up after {retry_policy.max_attempts} attempts: {last_failure.message}"
    )


async def stage_files(
    client: httpx.AsyncClient,
    base_url: str,
    files: Iterable[tuple[str, Path]],
    token: str,
    *,
    on_progress: ProgressCallback | None = None,
    retry_policy: RetryPolicy = DEFAULT_RETRY_POLICY,
) -> dict[str, str]:
    """Stage several ``(key, local_path)`` files one after another; returns ``{key: worker path}``.

    ``on_progress`` reports bytes over all files together. Stops at the first failure.
    """
    items = [(key, Path(path)) for key, path in files]
    sizes_bytes = [_local_size(path) for _, path in items]
    total_bytes = sum(sizes_bytes)
    done_bytes = 0
    staged: dict[str, str] = {}
    for (key, path), size_bytes in zip(items, sizes_bytes, strict=True):

        def report(sent: int, _total: int, base: int = done_bytes) -> None:
            if on_progress is not None:
                on_progress(base + sent, total_bytes)

        staged[key] = await stage_file(
            client, base_url, key, path, token, on_progress=report, retry_policy=retry_policy
        )
        done_bytes += size_bytes
    return staged


def _resume_offset(remote: RemoteFile | None, local_hash: str, size_bytes: int) -> int:
    """Continue a partial upload of the same content, else start from byte 0."""
    if remote is None or remote.target_sha256 != local_hash:
        return 0
    if 0 < remote.size_bytes < size_bytes:
        return remote.size_bytes
    return 0


def _local_size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0  # stage_file reports the real problem with the file's name


class _FileUpload:
    """The HTTP conversation about one file with one worker."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        key: str,
        local_path: Path,
        token: str,
        on_progress: ProgressCallback | None,
    ) -> None:
        self.client = client
        self.base_url = base_url
        self.key = key
        self.local_path = local_path
        self.url = file_url(base_url, key)
        self.auth_headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.on_progress = on_progress

    def report(self, sent_bytes: int, total_bytes: int) -> None:
        if self.on_progress is not None:
            self.on_progress(sent_bytes, total_bytes)

    def failed(self, status: int | None, message: str) -> StagingFailed:
        return StagingFailed(
            local_path=self.local_path, key=self.key, worker_url=self.base_url, status=status, message=message
        )

    async def describe_local_file(self) -> tuple[int, str]:
        try:
            size_bytes = os.stat(self.local_path).st_size
            local_hash = await asyncio.to_thread(cached_sha256, self.local_path)
        except OSError as exc:
            raise self.failed(None, f"cannot read the local file: {exc}") from exc
        return size_bytes, local_hash

    async def head(self) -> RemoteFile | None:
        try:
            response = await self.client.head(self.url, headers=self.auth_headers, timeout=HEAD_TIMEOUT)
        except TRANSIENT_ERRORS as exc:
            raise _Retryable(None, f"HEAD {self.url}: {_describe(exc)}") from exc
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            # HEAD answers carry no body; say what the status usually means.
            raise self.failed(response.status_code, f"HEAD {self.url} refused: {_status_hint(response)}")
        return RemoteFile(
            size_bytes=_int_header(response, HEADER_FILE_SIZE),
            local_path=response.headers.get(HEADER_LOCAL_PATH, ""),
            content_sha256=_hash_header(response, HEADER_CONTENT_SHA256),
            target_sha256=_hash_header(response, HEADER_TARGET_SHA256),
        )

    async def put(self, size_bytes: int, local_hash: str, offset_bytes: int, *, resumable: bool) -> str:
        headers = {
            **self.auth_headers,
            "Content-Type": "application/octet-stream",
            "Content-Length": str(size_bytes - offset_bytes),
            HEADER_CONTENT_SHA256: local_hash,
        }
        if resumable and size_bytes > 0:
            headers["Content-Range"] = f"bytes {offset_bytes}-{size_bytes - 1}/{size_bytes}"
        body = self._read_chunks(offset_bytes, size_bytes)
        try:
            response = await self.client.put(self.url, content=body, headers=headers, timeout=PUT_TIMEOUT)
        except TRANSIENT_ERRORS as exc:
            raise _Retryable(None, f"PUT {self.url}: {_describe(exc)}") from exc
        finally:
            await body.aclose()
        if response.status_code in RETRYABLE_STATUSES:
            raise _Retryable(response.status_code, f"PUT {self.url}: {_worker_message(response)}")
        if response.status_code != 200:
            raise self.failed(response.status_code, _worker_message(response))
        local_path = _json_field(response, "local_path")
        if not local_path:
            raise self.failed(200, f"the worker's answer has no local_path: {response.text[:200]!r}")
        return local_path

    async def _read_chunks(self, offset_bytes: int, size_bytes: int) -> AsyncIterator[bytes]:
        sent_bytes = offset_bytes
        self.report(sent_bytes, size_bytes)
        with open(self.local_path, "rb") as file:
            file.seek(offset_bytes)
            while sent_bytes < size_bytes:
                want_bytes = min(UPLOAD_CHUNK_BYTES, size_bytes - sent_bytes)
                chunk = await asyncio.to_thread(file.read, want_bytes)
                if not chunk:
                    raise self.failed(
                        None, f"the local file shrank to {sent_bytes} bytes while uploading {size_bytes}"
                    )
                yield chunk
                sent_bytes += len(chunk)
                self.report(sent_bytes, size_bytes)


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _int_header(response: httpx.Response, name: str) -> int:
    value = response.headers.get(name, "")
    return int(value) if value.isdigit() else 0


def _hash_header(response: httpx.Response, name: str) -> str | None:
    value = response.headers.get(name, "").strip()
    return value.lower() if is_sha256_hex(value) else None


def _json_field(response: httpx.Response, field: str) -> str | None:
    try:
        payload = response.json()
    except ValueError:
        return None
    value = payload.get(field) if isinstance(payload, dict) else None
    return value if isinstance(value, str) else None


def _worker_message(response: httpx.Response) -> str:
    message = _json_field(response, "error") or response.text.strip()[:500]
    return message or _status_hint(response)


def _status_hint(response: httpx.Response) -> str:
    hints = {
        400: "bad request (malformed key or path outside the worker's directories)",
        401: "unauthorized: the frontend's registration token does not match the worker's",
        413: "file larger than the worker's upload limit",
    }
    return hints.get(response.status_code, response.reason_phrase or f"HTTP {response.status_code}")
