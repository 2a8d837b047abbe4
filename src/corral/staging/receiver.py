"""Worker side of file staging: the §6.4 protocol of the file server on the worker's base port - 1.

Routes (``/v1/*`` need ``Authorization: Bearer <registration token>``; unlike the reference, an empty
token refuses them unless ``allow_unauthenticated=True``):

* ``GET|HEAD /healthz`` -- liveness, always ``200 ok``. ``GET|HEAD /readyz`` -- ``200 ok`` or
  ``503 not ready: <reason>``.
* ``HEAD /v1/files/{key}`` -- ``X-File-Size``, ``X-Local-Path`` and ``X-Content-SHA256`` (cached in a
  ``.sha256`` sidecar), or ``X-Target-SHA256`` while a resumable upload is partial.
* ``PUT /v1/files/{key}`` -- without ``Content-Range``: streamed to a temp file, verified against
  ``X-Content-SHA256``, renamed into place. With ``Content-Range: bytes <start>-<end>/<total>``:
  appended in place (308 incomplete, 416 wrong offset, 409 different file, 200 done). A full-size
  unfinished file whose hash matches is finalised without rewriting it; a corrupt one is replaced
  by the body of the same request. ``Content-Range: bytes */<total>`` with an empty body asks for
  exactly that finalisation (200, or 416 with the size to resume from).
* ``GET /v1/files/{key}`` -- download (sendfile). ``POST /v1/files/temp`` -- a fresh temp file.
  ``GET /v1/files-list/{key}`` -- files below a directory.
* ``POST /v1/files/release`` -- release a request's ephemeral inputs (:mod:`corral.staging.ephemeral_http`).

Before accepting an upload the models filesystem must hold the bytes still to come (507 otherwise). An
``ephemeral/<category>/<request id>/<name>`` key (a request's input) must also fit the ephemeral ledger
(:mod:`corral.staging.ephemeral_ledger`): its declared size is reserved before any byte is written, or the
PUT is answered 507 naming the setting it would pass.
"""

from __future__ import annotations

import logging
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from corral.staging import hashing
from corral.staging.body_writer import BodyTooLong, DiskFull, write_body
from corral.staging.buffer_hasher import BufferHasher
from corral.staging.content_range import ContentRange, parse_content_range, parse_status_query
from corral.staging.disk_space import DiskBudget, DiskReservation, NotEnoughDisk, enospc_message
from corral.staging.ephemeral_http import RELEASE_PATH, release_inputs, reserve_input
from corral.staging.ephemeral_ledger import (
    EphemeralLedger,
    EphemeralLimits,
    ephemeral_root,
    is_ephemeral_key,
    resolve_ephemeral_key,
)
from corral.staging.errors import KeyEscapesDirectory, ReservedKey
from corral.staging.file_server import Answer, FileRequest, ServerLimits, ThreadedFileServer, TransferStats
from corral.staging.following_hasher import FollowingHasher
from corral.staging.keys import is_reserved_name, resolve_key, staging_dir
from corral.staging.partial_digests import PartialDigests
from corral.staging.path_locks import PathLocks

log = logging.getLogger(__name__)

HEADER_CONTENT_SHA256 = "X-Content-SHA256"
HEADER_TARGET_SHA256 = "X-Target-SHA256"
HEADER_LOCAL_PATH = "X-Local-Path"
HEADER_FILE_SIZE = "X-File-Size"
DEFAULT_MAX_UPLOAD_BYTES = 50 << 30
UPLOAD_FILE_MODE = 0o644
FILES_PREFIX = "/v1/files/"
LIST_PREFIX = "/v1/files-list/"

Readiness = Callable[[], str | None]
"""Returns None when the worker can accept work, else a reason it cannot."""

__all__ = ["ContentRange", "FileStore", "build_file_server", "parse_content_range"]


class Reject(Exception):
    """An HTTP error answer raised from deep inside a handler."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.answer = Answer.error(status, message, headers)


def build_file_server(
    models_dir: Path,
    token: str,
    *,
    readiness: Readiness,
    allow_unauthenticated: bool = False,
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
    disk_budget: DiskBudget | None = None,
    limits: ServerLimits | None = None,
    ephemeral: EphemeralLedger | None = None,
) -> ThreadedFileServer:
    """The worker's file server; ``await server.start(host, port)`` serves it, ``await server.stop()`` ends it.

    ``ephemeral`` is the worker's ledger of request inputs (shared with S3 mode's ``files.ensure``); without
    one, a ledger with the filesystem-based default limits is made.
    """
    if ephemeral is None:
        root = ephemeral_root(Path(models_dir))
        ephemeral = EphemeralLedger(root, EphemeralLimits.resolve(0, 0, root))
    stats = TransferStats()
    store = FileStore(
        Path(models_dir),
        readiness,
        max_upload_bytes,
        disk_budget or DiskBudget(),
        ephemeral,
        on_body_bytes=stats.count_body_bytes,
        on_hash_read=stats.count_hash_read_bytes,
    )
    return ThreadedFileServer(
        store.dispatch, token=token, allow_unauthenticated=allow_unauthenticated, limits=limits, stats=stats
    )


class FileStore:
    """The routes over one models directory."""

    def __init__(
        self,
        models_dir: Path,
        readiness: Readiness,
        max_upload_bytes: int,
        disk_budget: DiskBudget,
        ephemeral: EphemeralLedger,
        *,
        on_body_bytes: Callable[[int], None] | None = None,
        on_hash_read: Callable[[int], None] | None = None,
    ) -> None:
        self.models_dir = models_dir
        self.ephemeral = ephemeral
        self.readiness = readiness
        self.max_upload_bytes = max_upload_bytes
        self.disk_budget = disk_budget
        self.on_body_bytes = on_body_bytes  # request body bytes read (the server's transfer figures)
        self.on_hash_read = on_hash_read  # bytes read back to hash a file
        self.partial_digests = PartialDigests()  # running hashes of partial range uploads
        self.upload_locks = PathLocks()  # one upload at a time per file
        self.hash_locks = PathLocks()  # orders sidecar writes against HEAD's hashing

    def dispatch(self, request: FileRequest) -> Answer:
        path, method = request.path, request.method
        if path in ("/healthz", "/readyz"):
            if method not in ("GET", "HEAD"):
                return Answer.error(405, f"{method} is not allowed on {path}")
            return self._probe(path)
        if path == "/v1/files/temp" and method == "POST":
            return self._temp()
        if path == RELEASE_PATH and method == "POST":
            return release_inputs(request.body, self.models_dir, self.ephemeral, self.upload_locks)
        try:
            if path.startswith(FILES_PREFIX) and method in ("GET", "HEAD", "PUT"):
                return self._file(request, path[len(FILES_PREFIX) :])
            if path.startswith(LIST_PREFIX) and method == "GET":
                return self._list(path[len(LIST_PREFIX) :])
        except ReservedKey as exc:
            return Answer.error(403, str(exc))
        except KeyEscapesDirectory as exc:
            return Answer.error(400, str(exc))
        except Reject as reject:
            return reject.answer
        return Answer.error(404, f"no route for {method} {path}")

    def _probe(self, path: str) -> Answer:
        if path == "/healthz":
            return Answer.text(200, "ok")
        try:
            reason = self.readiness()
        except Exception as exc:  # a broken probe means "not ready", never a 500
            reason = f"readiness check failed: {exc}"
        return Answer.text(200, "ok") if reason is None else Answer.text(503, f"not ready: {reason}")

    def _file(self, request: FileRequest, key: str) -> Answer:
        target = resolve_key(key, self.models_dir)
        try:
            if request.method == "HEAD":
                return self._head(key, target)
            if request.method == "GET":
                _file_size(key, target)
                return Answer(200, sendfile=target)
            return self._put(request, key, target)
        except DiskFull:
            return Answer.error(507, enospc_message(f"key {key!r}", target.parent))
        except OSError as exc:
            log.exception("%s of key %s failed", request.method, key)
            return Answer.error(500, f"{request.method} of key {key!r} failed on the worker: {exc}")

    def _head(self, key: str, path: Path) -> Answer:
        size_bytes = _file_size(key, path)
        headers = {
            HEADER_FILE_SIZE: str(size_bytes),
            HEADER_LOCAL_PATH: _header_text(str(path)),
            "Accept-Ranges": "bytes",
        }
        target = hashing.read_target_hash(path)
        if target is not None:
            headers[HEADER_TARGET_SHA256] = target
        else:
            with self.hash_locks.hold(path):
                try:
                    headers[HEADER_CONTENT_SHA256] = self._content_hash(path)
                except OSError as exc:
                    log.warning("cannot hash %s for HEAD %s: %s", path, key, exc)
        return Answer(200, headers=headers, length_bytes=size_bytes)

    def _content_hash(self, path: Path) -> str:
        """The hash of ``path`` as it is: its recorded hash while the file is unchanged, else the running
        digest of a partial upload this receiver wrote, else read from disk (and recorded)."""
        recorded = hashing.read_trusted_hash(path)
        if recorded is not None:
            return recorded
        kept = self.partial_digests.current(path)
        if kept is not None:
            return kept.hexdigest()
        return hashing.cached_sha256(path, on_progress=self._hash_read_counter())

    def _full_hash(self, path: Path) -> str:
        """SHA-256 of ``path``: the kept running digest while the file is as it was hashed, else read back."""
        kept = self.partial_digests.current(path)
        if kept is not None:
            return kept.hexdigest()
        return hashing.sha256_file(path, on_progress=self._hash_read_counter())

    def _hash_read_counter(self) -> hashing.ProgressCallback:
        done = [0]

        def count(done_bytes: int, _total: int) -> None:
            if self.on_hash_read is not None:
                self.on_hash_read(done_bytes - done[0])
            done[0] = done_bytes

        return count

    def _range_hasher(
        self, path: Path, content_range: ContentRange, completes: bool
    ) -> BufferHasher | FollowingHasher | None:
        """Hash a range from the receive buffers when the digest of everything before it is known (a
        range from byte 0, or one continuing a partial this receiver hashed); a completing range of a
        prefix it did not hash (a restart since) follows the file from byte 0 instead."""
        if content_range.start == 0:
            return BufferHasher()
        prefix = self.partial_digests.current(path)
        if prefix is not None:
            return BufferHasher(prefix=prefix, prefix_bytes=content_range.start)
        return FollowingHasher(path) if completes else None

    def _put(self, request: FileRequest, key: str, path: Path) -> Answer:
        if not is_ephemeral_key(key):
            with self.upload_locks.hold(path):
                return self._put_locked(request, key, path)
        resolve_ephemeral_key(key, self.models_dir)
        with self.upload_locks.hold(path):
            refusal = reserve_input(
                self.ephemeral, key, request.header("Content-Range"), _content_length(request)
            )
            if refusal is not None:  # decided before the directory or any byte is written
                return refusal
            try:
                return self._put_locked(request, key, path)
            finally:
                self.ephemeral.settle(key, path.is_file())

    def _put_locked(self, request: FileRequest, key: str, path: Path) -> Answer:
        declared = _declared_sha256(request)
        content_range = request.header("Content-Range")
        if path.is_dir():
            raise Reject(400, f"destination {str(path)!r} is a directory")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise Reject(400, f"a parent of {str(path)!r} is a file, not a directory") from None
        if not content_range:
            return self._put_full(request, key, path, declared)
        status_total = parse_status_query(content_range)
        if status_total is not None:
            return self._finalize_probe(path, status_total, declared)
        try:
            parsed = parse_content_range(content_range)
        except ValueError as exc:
            raise Reject(400, str(exc)) from None
        return self._put_range(request, key, path, parsed, declared)

    def _put_full(self, request: FileRequest, key: str, path: Path, declared: str | None) -> Answer:
        length = _content_length(request)
        if length is not None and length > self.max_upload_bytes:
            raise _too_large(length, self.max_upload_bytes)
        fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".upload")
        temp = Path(temp_name)
        try:
            with (
                self.disk_budget.reserve(path.parent, length or 0, f"key {key!r}") as reservation,
                os.fdopen(fd, "wb", buffering=0) as file,
            ):
                os.fchmod(file.fileno(), UPLOAD_FILE_MODE)
                hasher = BufferHasher()
                try:
                    received, cut = write_body(
                        request.body,
                        file,
                        limit_bytes=self.max_upload_bytes,
                        hasher=hasher,
                        on_bytes=self.on_body_bytes,
                        reservation=reservation,
                    )
                except BodyTooLong:
                    raise _too_large(None, self.max_upload_bytes) from None
                finally:
                    if request.body.finished:
                        actual = hasher.finish(_size(temp))
                    else:
                        hasher.abandon()
            if cut is not None:
                raise Reject(400, f"short body: {cut}; {received} bytes received")
            if length is not None and received != length:
                raise Reject(400, f"short body: got {received} bytes, Content-Length said {length}")
            if declared is not None and actual != declared:
                raise Reject(400, f"sha256 mismatch: expected {declared} got {actual}")
            with self.hash_locks.hold(path):
                hashing.remove_sidecars(path)
                os.replace(temp, path)
                _write_sidecar_quietly(path, actual)
        except NotEnoughDisk as exc:
            raise Reject(507, exc.message) from None
        finally:
            _unlink_if_present(temp)
        log.info("received %s (%d bytes, sha256 %s)", path, received, actual)
        return Answer.json(200, {"local_path": str(path)})

    def _put_range(
        self, request: FileRequest, key: str, path: Path, content_range: ContentRange, declared: str | None
    ) -> Answer:
        if content_range.total > self.max_upload_bytes:
            raise _too_large(content_range.total, self.max_upload_bytes)
        length = _content_length(request)
        if length is not None and length != content_range.length_bytes:
            raise Reject(
                400,
                f"Content-Length {length} does not match Content-Range {request.header('Content-Range')!r}",
            )
        current = _size_or_zero(path)
        if content_range.start == 0 and current > 0:
            if declared is not None and _stored_hash_equals(path, declared):
                if current == content_range.total:  # all bytes landed before an interrupted finalize
                    if self._verify_and_commit(path, declared):
                        return Answer.json(200, {"local_path": str(path)})
                    current = 0  # corrupt: removed; this request's body replaces it
            else:  # a different file under the same key: start over
                _remove_with_sidecars(path)
                current = 0
        if declared is not None and content_range.start > 0:
            previous = hashing.read_target_hash(path)
            if previous is not None and previous != declared:
                _remove_with_sidecars(path)
                raise Reject(
                    409,
                    f"X-Content-SHA256 mismatch with in-progress upload (was {previous}, "
                    f"now {declared}); restart from byte 0",
                )
        if content_range.start != current:
            raise Reject(
                416,
                f"Content-Range start {content_range.start} does not match current file size {current}",
                {"Content-Range": f"bytes */{content_range.total}", HEADER_FILE_SIZE: str(current)},
            )
        try:
            with self.disk_budget.reserve(
                path.parent, content_range.length_bytes, f"key {key!r}"
            ) as reservation:
                return self._append_range(request, path, content_range, declared, reservation)
        except NotEnoughDisk as exc:
            raise Reject(507, exc.message) from None

    def _append_range(
        self,
        request: FileRequest,
        path: Path,
        content_range: ContentRange,
        declared: str | None,
        reservation: DiskReservation,
    ) -> Answer:
        if declared is not None:
            hashing.write_sidecar(hashing.target_sidecar_path(path), declared)
        _unlink_if_present(hashing.hash_sidecar_path(path))
        expected = content_range.length_bytes
        completes = content_range.end + 1 == content_range.total
        with open(path, "ab", buffering=0) as file:
            os.fchmod(file.fileno(), UPLOAD_FILE_MODE)
            # The verify hash runs beside the writer, so completion costs only the tail, and what a range
            # leaves unfinished (308, a cut) keeps its running digest for the range that continues it.
            hasher = self._range_hasher(path, content_range, completes)
            try:
                received, cut = write_body(
                    request.body,
                    file,
                    limit_bytes=expected,
                    base_size_bytes=content_range.start,
                    hasher=hasher,
                    on_bytes=self.on_body_bytes,
                    reservation=reservation,
                )
            except BodyTooLong:
                raise Reject(
                    400, f"body is longer than the {expected} bytes its Content-Range declares"
                ) from None
            finally:
                if isinstance(hasher, BufferHasher):
                    self.partial_digests.keep(path, hasher.settle(), hasher.hashed_bytes)
                elif hasher is not None and not request.body.finished:
                    hasher.abandon()
        if received != expected:
            why = f" ({cut})" if cut is not None else ""
            raise Reject(400, f"short body: got {received} expected {expected}{why}")
        new_size = content_range.start + received
        if new_size < content_range.total:
            return Answer(308, headers={"Range": f"bytes=0-{new_size - 1}", HEADER_FILE_SIZE: str(new_size)})
        if isinstance(hasher, FollowingHasher) and self.on_hash_read is not None:
            self.on_hash_read(new_size)  # it read the whole file back, the prefix from disk
        actual = hasher.finish(new_size) if hasher is not None else hashing.sha256_file(path)
        if declared is not None and actual != declared:
            _remove_with_sidecars(path)
            raise Reject(400, f"sha256 mismatch: expected {declared} got {actual}")
        self._commit_in_place(path, actual)
        log.info("received %s by resumable upload (sha256 %s)", path, actual)
        return Answer.json(200, {"local_path": str(path)})

    def _finalize_probe(self, path: Path, total: int, declared: str | None) -> Answer:
        if declared is None:
            raise Reject(400, f"Content-Range 'bytes */{total}' needs {HEADER_CONTENT_SHA256}")
        current = _size_or_zero(path)
        if (
            current == total
            and hashing.read_target_hash(path) is None
            and hashing.read_trusted_hash(path) == declared
        ):
            return Answer.json(200, {"local_path": str(path)})
        if current == total and hashing.read_target_hash(path) == declared:
            if self._verify_and_commit(path, declared):
                return Answer.json(200, {"local_path": str(path)})
            current = 0
        elif hashing.read_target_hash(path) != declared:
            _remove_with_sidecars(path)
            current = 0
        return Answer.error(
            416,
            f"file holds {current} of {total} bytes; continue from byte {current}",
            {"Content-Range": f"bytes */{total}", HEADER_FILE_SIZE: str(current)},
        )

    def _verify_and_commit(self, path: Path, declared: str) -> bool:
        """Finalise a full-size unfinished file if its content matches, else delete it (False)."""
        actual = self._full_hash(path)
        if actual != declared:
            log.warning(
                "unfinished upload %s is corrupt (sha256 %s, expected %s): removed", path, actual, declared
            )
            _remove_with_sidecars(path)
            return False
        self._commit_in_place(path, actual)
        log.info("finalised %s from an interrupted upload without re-sending it", path)
        return True

    def _commit_in_place(self, path: Path, hash_hex: str) -> None:
        self.partial_digests.forget(path)  # complete: its recorded hash takes over
        with self.hash_locks.hold(path):
            _write_sidecar_quietly(path, hash_hex)
            _unlink_if_present(hashing.target_sidecar_path(path))

    def _temp(self) -> Answer:
        directory = staging_dir(self.models_dir)
        directory.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=directory, prefix="localai-output-", suffix=".tmp")
        os.close(fd)
        return Answer.json(200, {"local_path": name})

    def _list(self, key: str) -> Answer:
        directory = resolve_key(key.rstrip("/"), self.models_dir)
        if not directory.is_dir():
            return Answer.error(404, "directory not found")
        files = sorted(
            p.relative_to(directory).as_posix()
            for p in directory.rglob("*")
            if p.is_file() and not is_reserved_name(p.name)
        )
        return Answer.json(200, {"files": files or None})


def _file_size(key: str, path: Path) -> int:
    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        raise Reject(404, f"file not found: no file for key {key!r}") from None
    if stat.S_ISDIR(info.st_mode):
        raise Reject(400, f"key {key!r} names a directory, not a file")
    return info.st_size


def _size(path: Path) -> int:
    return os.stat(path).st_size


def _size_or_zero(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def _stored_hash_equals(path: Path, declared: str) -> bool:
    stored = hashing.read_target_hash(path)
    if stored is None:
        stored = hashing.read_trusted_hash(path)
    return stored == declared


def _declared_sha256(request: FileRequest) -> str | None:
    value = request.header(HEADER_CONTENT_SHA256)
    if not value:
        return None
    if not hashing.is_sha256_hex(value):
        raise Reject(400, f"{HEADER_CONTENT_SHA256} must be 64 hex characters, got {value!r}")
    return value.lower()


def _content_length(request: FileRequest) -> int | None:
    if "chunked" in request.header("Transfer-Encoding").lower():
        return None
    value = request.header("Content-Length")
    return int(value) if value.isdigit() else None


def _too_large(size_bytes: int | None, max_bytes: int) -> Reject:
    size_text = f"{size_bytes} bytes" if size_bytes is not None else "the body"
    return Reject(413, f"upload too large: {size_text} exceeds this worker's limit of {max_bytes} bytes")


def _write_sidecar_quietly(path: Path, hash_hex: str) -> None:
    try:
        hashing.record_hash(path, hash_hex)
    except OSError as exc:
        log.warning("cannot write hash sidecar for %s: %s", path, exc)


def _remove_with_sidecars(path: Path) -> None:
    _unlink_if_present(path)
    hashing.remove_sidecars(path)


def _unlink_if_present(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _header_text(value: str) -> str:
    """Header values go out as latin-1; send UTF-8 bytes as the reference (Go) does."""
    return value.encode("utf-8", errors="surrogateescape").decode("latin-1")
