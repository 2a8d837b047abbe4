"""Worker side of file staging: the HTTP file server on the worker's base port - 1 (reference §6.4).

Routes:

* ``GET|HEAD /healthz`` -- liveness, always ``200 ok``, no auth.
* ``GET|HEAD /readyz``  -- readiness, ``200 ok`` or ``503 not ready: <reason>``, no auth.
* ``HEAD /v1/files/{key}`` -- size, worker path and hash (``X-Content-SHA256``; ``X-Target-SHA256``
  instead while a resumable upload is partial).
* ``PUT /v1/files/{key}`` -- full upload (no ``Content-Range``): streamed to a temp file next to the
  target while hashing, verified against ``X-Content-SHA256``, renamed into place atomically.
  With ``Content-Range: bytes <start>-<end>/<total>``: resumable upload appended in place
  (308 incomplete, 416 wrong offset, 409 different file, 200 done).
* ``GET /v1/files/{key}`` -- download.

Everything under ``/v1/`` needs ``Authorization: Bearer <registration token>``. Unlike the reference
(which fails open), an empty token refuses ``/v1/*`` unless ``allow_unauthenticated=True``.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import stat
import tempfile
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from corral.staging import hashing
from corral.staging.errors import KeyEscapesDirectory
from corral.staging.keys import resolve_key

log = logging.getLogger(__name__)

HEADER_CONTENT_SHA256 = "X-Content-SHA256"
HEADER_TARGET_SHA256 = "X-Target-SHA256"
HEADER_LOCAL_PATH = "X-Local-Path"
HEADER_FILE_SIZE = "X-File-Size"
DEFAULT_MAX_UPLOAD_BYTES = 50 << 30
WRITE_BATCH_BYTES = 1 << 20
UPLOAD_FILE_MODE = 0o644

Readiness = Callable[[], str | None]
"""Returns None when the worker can accept work, else a reason it cannot."""


class _Reject(Exception):
    """An HTTP error answer raised from deep inside a handler."""

    def __init__(self, status_code: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.headers = headers or {}

    def response(self) -> Response:
        return JSONResponse({"error": self.message}, self.status_code, headers=self.headers)


@dataclass(frozen=True)
class ContentRange:
    """Parsed ``Content-Range: bytes <start>-<end>/<total>`` of a resumable PUT (inclusive end)."""

    start: int
    end: int
    total: int

    @property
    def length_bytes(self) -> int:
        return self.end - self.start + 1


def parse_content_range(value: str) -> ContentRange:
    """Parse a Content-Range header; raises ValueError naming what is wrong with it."""
    text = value.strip()
    if not text.startswith("bytes "):
        raise ValueError(f"invalid Content-Range {value!r}: missing 'bytes' prefix")
    range_part, slash, total_part = text[len("bytes ") :].strip().partition("/")
    start_part, dash, end_part = range_part.partition("-")
    if not slash or not dash:
        raise ValueError(f"invalid Content-Range {value!r}: expected 'bytes <start>-<end>/<total>'")
    try:
        start, end, total = int(start_part), int(end_part), int(total_part)
    except ValueError:
        raise ValueError(f"invalid Content-Range {value!r}: start, end and total must be integers") from None
    if start < 0 or end < start or total < end + 1:
        raise ValueError(f"invalid Content-Range range: {start}-{end}/{total}")
    return ContentRange(start, end, total)


def build_file_server(
    models_dir: Path,
    token: str,
    *,
    readiness: Readiness,
    allow_unauthenticated: bool = False,
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
) -> Starlette:
    """The worker's file server as an ASGI app (serve it with uvicorn on base port - 1)."""
    if not token and allow_unauthenticated:
        log.warning(
            "worker file server runs WITHOUT a registration token: anyone who can reach it can read and "
            "write the models/data/staging dirs; set LOCALAI_REGISTRATION_TOKEN"
        )
    store = _FileStore(Path(models_dir), max_upload_bytes)

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    async def readyz(request: Request) -> Response:
        try:
            reason = readiness()
        except Exception as exc:  # a broken probe means "not ready", never a 500
            reason = f"readiness check failed: {exc}"
        if reason is None:
            return PlainTextResponse("ok")
        return PlainTextResponse(f"not ready: {reason}", status_code=503)

    routes = [
        Route("/healthz", healthz, methods=["GET", "HEAD"]),
        Route("/readyz", readyz, methods=["GET", "HEAD"]),
        Route("/v1/files/{key:path}", store.handle, methods=["GET", "HEAD", "PUT"]),
    ]
    app = Starlette(routes=routes)
    app.add_middleware(_BearerAuth, token=token, allow_unauthenticated=allow_unauthenticated)
    return app


class _BearerAuth:
    """Refuses ``/v1/*`` requests without ``Authorization: Bearer <token>`` (constant-time compare)."""

    def __init__(self, app: ASGIApp, *, token: str, allow_unauthenticated: bool) -> None:
        self.app = app
        self.expected = token.encode()
        self.allow_unauthenticated = allow_unauthenticated

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and (path == "/v1" or path.startswith("/v1/")):
            problem = self._problem(scope)
            if problem is not None:
                response = JSONResponse({"error": problem}, 401, headers={"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _problem(self, scope: Scope) -> str | None:
        if not self.expected:
            if self.allow_unauthenticated:
                return None
            return (
                "this worker has no registration token, so its file server refuses all /v1 requests; "
                "set LOCALAI_REGISTRATION_TOKEN on the worker and frontend (or set allow_unauthenticated "
                "explicitly to serve files without auth)"
            )
        header = dict(scope["headers"]).get(b"authorization", b"")
        scheme, _, provided = header.partition(b" ")
        if scheme.lower() != b"bearer" or not provided:
            return "missing 'Authorization: Bearer <registration token>' header"
        if not hmac.compare_digest(provided.strip(), self.expected):
            return "wrong bearer token: it must equal the worker's registration token"
        return None


class _FileStore:
    """The ``/v1/files/{key}`` handlers over one models directory."""

    def __init__(self, models_dir: Path, max_upload_bytes: int) -> None:
        self.models_dir = models_dir
        self.max_upload_bytes = max_upload_bytes
        # One upload at a time per file; a hash lock orders sidecar writes against HEAD's hashing.
        self._upload_locks: weakref.WeakValueDictionary[Path, asyncio.Lock] = weakref.WeakValueDictionary()
        self._hash_locks: weakref.WeakValueDictionary[Path, asyncio.Lock] = weakref.WeakValueDictionary()

    async def handle(self, request: Request) -> Response:
        key = request.path_params["key"]
        try:
            path = resolve_key(key, self.models_dir)
            if request.method == "PUT":
                return await self._put(request, path)
            if request.method == "HEAD":
                return await self._head(key, path)
            return await self._get(key, path)
        except KeyEscapesDirectory as exc:
            return _Reject(400, str(exc)).response()
        except _Reject as reject:
            return reject.response()
        except OSError as exc:
            log.exception("%s %s failed", request.method, key)
            return _Reject(500, f"{request.method} of key {key!r} failed on the worker: {exc}").response()

    async def _head(self, key: str, path: Path) -> Response:
        size_bytes = await asyncio.to_thread(_file_size, key, path)
        headers = {
            HEADER_FILE_SIZE: str(size_bytes),
            "Content-Length": str(size_bytes),
            HEADER_LOCAL_PATH: _header_text(str(path)),
            "Accept-Ranges": "bytes",
        }
        target = await asyncio.to_thread(hashing.read_target_hash, path)
        if target is not None:
            headers[HEADER_TARGET_SHA256] = target
            return Response(status_code=200, headers=headers)
        async with _lock(self._hash_locks, path):
            try:
                headers[HEADER_CONTENT_SHA256] = await asyncio.to_thread(hashing.cached_sha256, path)
            except OSError as exc:
                log.warning("cannot hash %s for HEAD %s: %s", path, key, exc)
        return Response(status_code=200, headers=headers)

    async def _get(self, key: str, path: Path) -> Response:
        await asyncio.to_thread(_file_size, key, path)
        return FileResponse(path, media_type="application/octet-stream")

    async def _put(self, request: Request, path: Path) -> Response:
        declared = _declared_sha256(request)
        content_range = request.headers.get("content-range", "").strip()
        async with _lock(self._upload_locks, path):
            if await asyncio.to_thread(path.is_dir):
                raise _Reject(400, f"destination {str(path)!r} is a directory")
            try:
                await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                raise _Reject(400, f"a parent of {str(path)!r} is a file, not a directory") from None
            if content_range:
                return await self._put_range(request, path, content_range, declared)
            return await self._put_full(request, path, declared)

    async def _put_full(self, request: Request, path: Path, declared: str | None) -> Response:
        content_length = _content_length(request)
        if content_length is not None and content_length > self.max_upload_bytes:
            raise _too_large(content_length, self.max_upload_bytes)
        fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".upload")
        temp = Path(temp_name)
        try:
            with os.fdopen(fd, "wb", buffering=0) as file:
                os.fchmod(file.fileno(), UPLOAD_FILE_MODE)
                digest = hashlib.sha256()
                over_limit = _too_large(None, self.max_upload_bytes)
                received, complete = await _stream_body(
                    request, file, digest, self.max_upload_bytes, over_limit
                )
            if not complete:
                raise _Reject(400, f"short body: connection closed after {received} bytes")
            if content_length is not None and received != content_length:
                raise _Reject(400, f"short body: got {received} bytes, Content-Length said {content_length}")
            actual = digest.hexdigest()
            if declared is not None and actual != declared:
                raise _Reject(400, f"sha256 mismatch: expected {declared} got {actual}")
            async with _lock(self._hash_locks, path):
                await asyncio.to_thread(_commit_full_upload, temp, path, actual)
        finally:
            await asyncio.to_thread(_unlink_if_present, temp)
        log.info("received %s (%d bytes, sha256 %s)", path, received, actual)
        return JSONResponse({"local_path": str(path)})

    async def _put_range(self, request: Request, path: Path, header: str, declared: str | None) -> Response:
        try:
            content_range = parse_content_range(header)
        except ValueError as exc:
            raise _Reject(400, str(exc)) from None
        if content_range.total > self.max_upload_bytes:
            raise _too_large(content_range.total, self.max_upload_bytes)
        content_length = _content_length(request)
        if content_length is not None and content_length != content_range.length_bytes:
            raise _Reject(
                400, f"Content-Length {content_length} does not match Content-Range {header.strip()!r}"
            )
        current = await asyncio.to_thread(_size_or_zero, path)
        if content_range.start == 0 and current > 0:
            if declared is not None and await asyncio.to_thread(_stored_hash_equals, path, declared):
                if current == content_range.total:  # all bytes landed before an interrupted finalize
                    return await self._finalize_range(path, declared)
            else:  # a different file under the same key: start over
                await asyncio.to_thread(_remove_with_sidecars, path)
                current = 0
        if declared is not None and content_range.start > 0:
            previous = await asyncio.to_thread(hashing.read_target_hash, path)
            if previous is not None and previous != declared:
                await asyncio.to_thread(_remove_with_sidecars, path)
                raise _Reject(
                    409,
                    f"X-Content-SHA256 mismatch with in-progress upload (was {previous}, now {declared}); "
                    "restart from byte 0",
                )
        if content_range.start != current:
            raise _Reject(
                416,
                f"Content-Range start {content_range.start} does not match current file size {current}",
                {"Content-Range": f"bytes */{content_range.total}", HEADER_FILE_SIZE: str(current)},
            )
        return await self._append_range(request, path, content_range, declared)

    async def _append_range(
        self, request: Request, path: Path, content_range: ContentRange, declared: str | None
    ) -> Response:
        if declared is not None:
            await asyncio.to_thread(hashing.write_sidecar, hashing.target_sidecar_path(path), declared)
        await asyncio.to_thread(_unlink_if_present, hashing.hash_sidecar_path(path))
        expected = content_range.length_bytes
        over_limit = _Reject(400, f"body is longer than the {expected} bytes its Content-Range declares")
        # A body that starts at byte 0 is hashed as it arrives, so a one-request upload is not re-read.
        digest = hashlib.sha256() if content_range.start == 0 else None
        with open(path, "ab", buffering=0) as file:
            received, _ = await _stream_body(request, file, digest, expected, over_limit)
        new_size = content_range.start + received
        if received != expected:
            raise _Reject(400, f"short body: got {received} expected {expected}")
        if new_size < content_range.total:
            headers = {"Range": f"bytes=0-{new_size - 1}", HEADER_FILE_SIZE: str(new_size)}
            return Response(status_code=308, headers=headers)
        return await self._finalize_range(path, declared, digest.hexdigest() if digest else None)

    async def _finalize_range(
        self, path: Path, declared: str | None, streamed_sha256: str | None = None
    ) -> Response:
        """Verify the completed file (re-reading it unless it was hashed while streaming) and commit."""
        actual = streamed_sha256 or await asyncio.to_thread(hashing.sha256_file, path)
        if declared is not None and actual != declared:
            await asyncio.to_thread(_remove_with_sidecars, path)
            raise _Reject(400, f"sha256 mismatch: expected {declared} got {actual}")
        async with _lock(self._hash_locks, path):
            await asyncio.to_thread(_commit_range_upload, path, actual)
        log.info("received %s by resumable upload (sha256 %s)", path, actual)
        return JSONResponse({"local_path": str(path)})


async def _stream_body(
    request: Request, file: Any, digest: Any, limit_bytes: int, over_limit: _Reject
) -> tuple[int, bool]:
    """Write the request body to ``file`` (and ``digest``) in 1 MiB batches.

    Returns (bytes received, whether the body ended normally rather than by a client disconnect).
    Bytes received before a disconnect are still written, so a resumable upload can continue from
    them. One batch is written by a thread while the next is received: memory stays at ~2 batches.
    """
    complete = True
    received = 0
    batch = bytearray()
    pending: asyncio.Future[None] | None = None
    try:
        async for chunk in request.stream():
            received += len(chunk)
            if received > limit_bytes:
                raise over_limit
            batch += chunk
            if len(batch) >= WRITE_BATCH_BYTES:
                if pending is not None:
                    await pending
                pending = asyncio.ensure_future(asyncio.to_thread(_write_batch, file, digest, batch))
                batch = bytearray()
    except ClientDisconnect:
        complete = False
    finally:
        if pending is not None:
            await pending
    if batch:
        await asyncio.to_thread(_write_batch, file, digest, batch)
    return received, complete


def _write_batch(file: Any, digest: Any, batch: bytearray) -> None:
    file.write(batch)
    if digest is not None:
        digest.update(batch)


def _commit_full_upload(temp: Path, path: Path, hash_hex: str) -> None:
    hashing.remove_sidecars(path)
    os.replace(temp, path)
    _write_sidecar_quietly(path, hash_hex)


def _commit_range_upload(path: Path, hash_hex: str) -> None:
    _write_sidecar_quietly(path, hash_hex)
    _unlink_if_present(hashing.target_sidecar_path(path))


def _write_sidecar_quietly(path: Path, hash_hex: str) -> None:
    try:
        hashing.write_sidecar(hashing.hash_sidecar_path(path), hash_hex)
    except OSError as exc:
        log.warning("cannot write hash sidecar for %s: %s", path, exc)


def _stored_hash_equals(path: Path, declared: str) -> bool:
    stored = hashing.read_target_hash(path)
    if stored is None:
        stored = hashing.read_trusted_hash(path)
    return stored == declared


def _remove_with_sidecars(path: Path) -> None:
    _unlink_if_present(path)
    hashing.remove_sidecars(path)


def _unlink_if_present(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _file_size(key: str, path: Path) -> int:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise _Reject(404, f"file not found: no file for key {key!r}") from None
    if stat.S_ISDIR(info.st_mode):
        raise _Reject(400, f"key {key!r} names a directory, not a file")
    return info.st_size


def _size_or_zero(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def _declared_sha256(request: Request) -> str | None:
    value = request.headers.get(HEADER_CONTENT_SHA256, "").strip()
    if not value:
        return None
    if not hashing.is_sha256_hex(value):
        raise _Reject(400, f"{HEADER_CONTENT_SHA256} must be 64 hex characters, got {value!r}")
    return value.lower()


def _content_length(request: Request) -> int | None:
    value = request.headers.get("content-length")
    if value is None:
        return None
    if not value.strip().isdigit():
        raise _Reject(400, f"invalid Content-Length {value!r}")
    return int(value)


def _too_large(size_bytes: int | None, max_bytes: int) -> _Reject:
    size_text = f"{size_bytes} bytes" if size_bytes is not None else "the body"
    return _Reject(413, f"upload too large: {size_text} exceeds this worker's limit of {max_bytes} bytes")


def _lock(locks: weakref.WeakValueDictionary[Path, asyncio.Lock], path: Path) -> asyncio.Lock:
    lock = locks.get(path)
    if lock is None:
        lock = asyncio.Lock()
        locks[path] = lock
    return lock


def _header_text(value: str) -> str:
    """Header values go out as latin-1; send UTF-8 bytes as the reference (Go) does."""
    return value.encode("utf-8", errors="surrogateescape").decode("latin-1")
