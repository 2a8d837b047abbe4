"""Frontend side of file staging: push a local file to a worker's file server (reference §6.4 client).

Protocol per file:

1. The local file's hash: its ``<file>.sha256`` sidecar while the file is unchanged, else hashed in
   a thread *while* the next steps run (hashing reports ``on_hash``).
2. ``HEAD /v1/files/<key>``: if the worker already has a file with the same ``X-Content-SHA256``,
   skip the upload and return its ``X-Local-Path``. If it has a partial upload whose
   ``X-Target-SHA256`` is our hash, resume from its ``X-File-Size``; if that partial is already
   full-size, ask the worker to verify and finalise it (``Content-Range: bytes */<size>``).
3. ``PUT`` the rest with ``sendfile`` (zero-copy), ``X-Content-SHA256`` and
   ``Content-Range: bytes <offset>-<size-1>/<size>``; the worker verifies the hash before answering
   ``200 {"local_path": ...}``.

When the local file had no recorded hash and the worker holds nothing that could be this file,
the transfer does not wait for the hash: all but the last byte go at once (``Content-Range: bytes
0-<size-2>/<size>``, no hash, answered 308), then the last byte with the hash. The worker hashes
both ranges from its receive buffers and verifies the whole file before it is usable, so the file
is read once on each side and the local hash costs no time of its own. A cut during the first
range resumes from what the worker kept, as any other.

Transient failures (connection refused/reset, timeouts, 308/416 from the resume protocol) are retried
with capped exponential backoff, HEAD-ing again first so a dropped upload resumes where it stopped.
An attempt that moved the worker's copy forward resets the count of attempts; the whole file has a
time budget. Anything else fails at once, naming the file, key, worker and HTTP status.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx

from corral.runtime import loops
from corral.staging.errors import StagingFailed
from corral.staging.hashing import is_sha256_hex, read_trusted_hash
from corral.staging.keys import validate_key
from corral.staging.local_hash import local_sha256
from corral.staging.receiver import (
    HEADER_CONTENT_SHA256,
    HEADER_FILE_SIZE,
    HEADER_LOCAL_PATH,
    HEADER_TARGET_SHA256,
)
from corral.staging.sendfile_put import Cancel, PutAnswer, SendCut, put_file_range
from corral.telemetry import tracing
from corral.telemetry.families import STAGING_BYTES, STAGING_THROUGHPUT

log = logging.getLogger(__name__)

# The worker may hash a large uncached file before answering HEAD: allow minutes, but bound it.
HEAD_TIMEOUT = httpx.Timeout(connect=30.0, read=1800.0, write=60.0, pool=60.0)
HASH_REPORT_EVERY_BYTES = 16 << 20
# Statuses of the resume protocol that mean "HEAD again and continue", not "give up".
RETRYABLE_STATUSES = frozenset({308, 416})
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
)

ProgressCallback = Callable[[int, int], None]
"""Called as ``on_progress(bytes_done, total_bytes)`` on the event loop."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry transient failures of one file's upload."""

    max_attempts: int = 5  # consecutive attempts that moved nothing forward
    first_backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    budget_s: float = 3600.0  # no new attempt starts after this long on one file

    def backoff_s(self, failures: int) -> float:
        """Sleep after ``failures`` consecutive failures: first_backoff_s doubling up to max_backoff_s."""
        return loops.backoff_s(failures, self.first_backoff_s, self.max_backoff_s)


DEFAULT_RETRY_POLICY = RetryPolicy()


@dataclass(frozen=True)
class RemoteFile:
    """What ``HEAD`` says the worker holds under a key."""

    size_bytes: int
    local_path: str
    content_sha256: str | None
    target_sha256: str | None


class _LocalHash:
    """The local file's SHA-256: known from its sidecar, or being computed by a thread (shared with anyone else
    hashing the same file in this process: :mod:`corral.staging.local_hash`)."""

    def __init__(self, known: str | None, computing: asyncio.Future[str] | None) -> None:
        self._known = known
        self._computing = computing

    @property
    def unrecorded(self) -> bool:
        """True when the file had no recorded hash: it is being computed (decided once, at the start)."""
        return self._computing is not None

    async def value(self) -> str:
        if self._known is None:
            assert self._computing is not None
            self._known = await asyncio.shield(self._computing)
        return self._known

    def close(self) -> None:
        """The upload ended without needing the hash: stop waiting for it (the thread finishes and records it
        for the next staging; the future is never cancelled, others may wait on it)."""
        self._computing = None


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
    on_hash: ProgressCallback | None = None,
    retry_policy: RetryPolicy = DEFAULT_RETRY_POLICY,
    resumable: bool = True,
    record_hash: bool = True,
) -> str:
    """Make the worker at ``base_url`` hold ``local_path`` under ``key``; return the worker's path.

    Raises :class:`StagingFailed` when the worker refuses the file or stays unreachable, and
    ``KeyEscapesDirectory`` for a malformed key. ``resumable=False`` sends one plain PUT per attempt
    (no ``Content-Range``; always from byte 0). ``record_hash=False`` never writes a ``.sha256`` beside
    the file (one outside the models directory: the plan decides).
    """
    validate_key(key)
    upload = _FileUpload(client, base_url, key, Path(local_path), token, on_progress)
    size_bytes, local = await upload.describe_local_file(on_hash, record_hash)
    try:
        staged = await _stage(upload, size_bytes, local, retry_policy, resumable)
    finally:
        local.close()
    if upload.sent_bytes > 0:  # one figure per file, over all its PUTs (ranges, resumes)
        STAGING_THROUGHPUT.observe(upload.sent_bytes / max(upload.sending_s, 1e-6))
    return staged


async def _stage(
    upload: _FileUpload, size_bytes: int, local: _LocalHash, retry_policy: RetryPolicy, resumable: bool
) -> str:
    started_s = time.monotonic()
    failures = 0
    last_failure = _Retryable(None, "no attempt was made")
    key, base_url = upload.key, upload.base_url
    while True:
        try:
            remote = await upload.head()
            if resumable and local.unrecorded and _nothing_to_match(remote, size_bytes, upload.sent_unhashed):
                return await upload.put_before_hash(size_bytes, local)
            local_hash = await upload.wait_hash(local)
            if remote is not None and remote.content_sha256 == local_hash and remote.local_path:
                upload.report(size_bytes, size_bytes)
                log.info("worker %s already has %s as %s; upload skipped", base_url, key, remote.local_path)
                return remote.local_path
            if resumable and _is_full_partial(remote, local_hash, size_bytes):
                return await upload.finalize(size_bytes, local_hash)
            offset_bytes = (
                _resume_offset(remote, local_hash, size_bytes, upload.sent_unhashed) if resumable else 0
            )
            return await upload.put(size_bytes, local_hash, offset_bytes, resumable=resumable)
        except _Retryable as failure:
            failures = 1 if upload.moved_forward() else failures + 1
            last_failure = failure
            log.warning(
                "staging %s to %s: attempt failed (%d in a row): %s", key, base_url, failures, failure.message
            )
        elapsed_s = time.monotonic() - started_s
        if (
            failures >= retry_policy.max_attempts
            or elapsed_s + retry_policy.backoff_s(failures) > retry_policy.budget_s
        ):
            break
        await asyncio.sleep(retry_policy.backoff_s(failures))
    raise upload.failed(last_failure.status, f"gave up after {failures} attempts: {last_failure.message}")


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


def _resume_offset(
    remote: RemoteFile | None, local_hash: str, size_bytes: int, sent_unhashed: bool = False
) -> int:
    """Continue a partial upload of the same content, else start from byte 0.

    A partial without a declared hash is continued only when this upload sent it (its first range
    goes before the local hash is known); the worker's verify of the whole file still decides.
    """
    if remote is None:
        return 0
    ours = remote.target_sha256 == local_hash or (sent_unhashed and remote.target_sha256 is None)
    if ours and 0 < remote.size_bytes < size_bytes:
        return remote.size_bytes
    return 0


def _nothing_to_match(remote: RemoteFile | None, size_bytes: int, sent_unhashed: bool) -> bool:
    """True when nothing the worker holds could be this file, so sending need not wait for its hash."""
    if size_bytes < 2 or sent_unhashed:
        return False  # the last byte carries the hash; a partial we sent resumes once the hash is known
    return remote is None or (remote.target_sha256 is None and remote.size_bytes != size_bytes)


def _is_full_partial(remote: RemoteFile | None, local_hash: str, size_bytes: int) -> bool:
    return (
        remote is not None
        and remote.target_sha256 == local_hash
        and size_bytes > 0
        and remote.size_bytes == size_bytes
    )


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
        self.auth_headers.update(tracing.headers() or {})  # the worker's span joins the load's trace
        self.on_progress = on_progress
        self.sent_bytes, self.sending_s = 0, 0.0  # body bytes sent in PUTs and the time they took (metrics)
        self.best_offset_bytes = -1  # furthest the worker's copy got; an attempt that raised it made progress
        self._last_offset_bytes = -1
        self.sent_unhashed = False  # a first range went before the local hash was known

    def report(self, done_bytes: int, total_bytes: int) -> None:
        if self.on_progress is not None:
            self.on_progress(done_bytes, total_bytes)

    def moved_forward(self) -> bool:
        moved = self.best_offset_bytes > self._last_offset_bytes
        self._last_offset_bytes = self.best_offset_bytes
        return moved

    def failed(self, status: int | None, message: str) -> StagingFailed:
        return StagingFailed(
            local_path=self.local_path, key=self.key, worker_url=self.base_url, status=status, message=message
        )

    async def describe_local_file(
        self, on_hash: ProgressCallback | None, record_hash: bool = True
    ) -> tuple[int, _LocalHash]:
        """The file's size, and its hash: recorded, or being computed in a thread from now on."""
        try:
            size_bytes = os.stat(self.local_path).st_size
            recorded = await asyncio.to_thread(read_trusted_hash, self.local_path)
        except OSError as exc:
            raise self.failed(None, f"cannot read the local file: {exc}") from exc
        if recorded is not None:
            if on_hash is not None:
                on_hash(size_bytes, size_bytes)
            return size_bytes, _LocalHash(recorded, None)
        report = threadsafe_progress(on_hash, HASH_REPORT_EVERY_BYTES)
        return size_bytes, _LocalHash(None, local_sha256(self.local_path, report, record=record_hash))

    async def wait_hash(self, local: _LocalHash) -> str:
        try:
            return await local.value()
        except OSError as exc:
            raise self.failed(None, f"cannot read the local file: {exc}") from exc

    async def put_before_hash(self, size_bytes: int, local: _LocalHash) -> str:
        """All but the last byte while the local hash runs (308), then the last byte with the hash."""
        headers = {
            **self.auth_headers,
            "Content-Type": "application/octet-stream",
            "Content-Range": f"bytes 0-{size_bytes - 2}/{size_bytes}",
        }
        self.sent_unhashed = True
        self.report(0, size_bytes)
        answer = await self._send(headers, 0, size_bytes - 1, size_bytes)
        if answer.status == 200:  # a server that ignored Content-Range kept a file one byte short, unverified
            raise self.failed(
                200,
                f"PUT {self.url}: the worker answered 200 to a partial range "
                f"(bytes 0-{size_bytes - 2}/{size_bytes}); it does not support resumable uploads",
            )
        if answer.status != 308:
            return self._answer(answer)  # raises: a refusal, or a resume-protocol answer to retry
        self.best_offset_bytes = max(self.best_offset_bytes, size_bytes - 1)
        local_hash = await self.wait_hash(local)
        return await self.put(size_bytes, local_hash, size_bytes - 1, resumable=True)

    async def head(self) -> RemoteFile | None:
        try:
            response = await self.client.head(self.url, headers=self.auth_headers, timeout=HEAD_TIMEOUT)
        except TRANSIENT_ERRORS as exc:
            raise _Retryable(None, f"HEAD {self.url}: {_describe(exc)}") from exc
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            # HEAD answers carry no body; say what the status usually means.
            raise self.failed(
                response.status_code,
                f"HEAD {self.url} refused: {_status_hint(response.status_code, response.reason_phrase)}",
            )
        remote = RemoteFile(
            size_bytes=_int_header(response.headers.get(HEADER_FILE_SIZE, "")),
            local_path=response.headers.get(HEADER_LOCAL_PATH, ""),
            content_sha256=_hash_header(response.headers.get(HEADER_CONTENT_SHA256, "")),
            target_sha256=_hash_header(response.headers.get(HEADER_TARGET_SHA256, "")),
        )
        if remote.target_sha256 is not None:
            self.best_offset_bytes = max(self.best_offset_bytes, remote.size_bytes)
        return remote

    async def finalize(self, size_bytes: int, local_hash: str) -> str:
        """Ask the worker to verify and finalise a full-size unfinished copy (no body is sent)."""
        headers = {
            **self.auth_headers,
            HEADER_CONTENT_SHA256: local_hash,
            "Content-Range": f"bytes */{size_bytes}",
        }
        log.info(
            "worker %s holds all %d bytes of %s unfinished; asking it to verify and finalise",
            self.base_url,
            size_bytes,
            self.key,
        )
        return self._answer(await self._send(headers, 0, 0, size_bytes))

    async def put(self, size_bytes: int, local_hash: str, offset_bytes: int, *, resumable: bool) -> str:
        headers = {
            **self.auth_headers,
            "Content-Type": "application/octet-stream",
            HEADER_CONTENT_SHA256: local_hash,
        }
        if resumable and size_bytes > 0:
            headers["Content-Range"] = f"bytes {offset_bytes}-{size_bytes - 1}/{size_bytes}"
        self.report(offset_bytes, size_bytes)
        answer = await self._send(headers, offset_bytes, size_bytes - offset_bytes, size_bytes)
        return self._answer(answer)

    async def _send(
        self, headers: dict[str, str], offset_bytes: int, count_bytes: int, size_bytes: int
    ) -> PutAnswer:
        loop = asyncio.get_running_loop()
        cancel = Cancel()

        def sent(done: int) -> None:
            loop.call_soon_threadsafe(self.report, offset_bytes + done, size_bytes)

        started_s = time.monotonic()
        try:
            answer = await asyncio.to_thread(
                put_file_range,
                self.url,
                headers,
                self.local_path,
                offset_bytes,
                count_bytes,
                on_sent=sent,
                cancel=cancel,
            )
        except asyncio.CancelledError:
            cancel.cancel()  # wakes the thread; the worker keeps what arrived for a later resume
            raise
        except SendCut as exc:
            raise _Retryable(None, f"PUT {self.url}: {exc}") from None
        except OSError as exc:  # the local file vanished or shrank
            raise self.failed(None, f"cannot read the local file: {exc}") from None
        if count_bytes > 0:
            STAGING_BYTES.inc(count_bytes)
            self.sent_bytes += count_bytes
            self.sending_s += time.monotonic() - started_s
        return answer

    def _answer(self, answer: PutAnswer) -> str:
        message = _worker_message(answer)
        if answer.status in RETRYABLE_STATUSES:
            size_text = answer.headers.get(HEADER_FILE_SIZE.lower(), "")
            if size_text.isdigit():
                self.best_offset_bytes = max(self.best_offset_bytes, int(size_text))
            raise _Retryable(answer.status, f"PUT {self.url}: {message}")
        if answer.status != 200:
            raise self.failed(answer.status, message)
        local_path = _json_field(answer.body, "local_path")
        if not local_path:
            raise self.failed(200, f"the worker's answer has no local_path: {answer.body[:200]!r}")
        return local_path


def threadsafe_progress(callback: ProgressCallback | None, every_bytes: int) -> ProgressCallback | None:
    """A progress callback safe to call from a worker thread: throttled, delivered on the loop."""
    if callback is None:
        return None
    loop = asyncio.get_running_loop()
    last = [-every_bytes]

    def report(done: int, total: int) -> None:
        if done - last[0] >= every_bytes or done >= total:
            last[0] = done
            loop.call_soon_threadsafe(callback, done, total)

    return report


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _int_header(value: str) -> int:
    return int(value) if value.isdigit() else 0


def _hash_header(value: str) -> str | None:
    value = value.strip()
    return value.lower() if is_sha256_hex(value) else None


def _json_field(body: bytes, name: str) -> str | None:
    try:
        payload = json.loads(body)
    except ValueError:
        return None
    value = payload.get(name) if isinstance(payload, dict) else None
    return value if isinstance(value, str) else None


def _worker_message(answer: PutAnswer) -> str:
    message = _json_field(answer.body, "error") or answer.body.decode("utf-8", "replace").strip()[:500]
    return message or _status_hint(answer.status, answer.reason)


def _status_hint(status: int, reason: str) -> str:
    hints = {
        400: "bad request (malformed key or path outside the worker's directories)",
        401: "unauthorized: the frontend's registration token does not match the worker's",
        413: "file larger than the worker's upload limit",
        507: "the worker's models filesystem has no room for this file",
    }
    return hints.get(status, reason or f"HTTP {status}")
