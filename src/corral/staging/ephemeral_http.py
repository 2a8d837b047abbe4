"""The file server's side of ephemeral request inputs: reserving a PUT, and the release route.

:func:`reserve_input` runs before a PUT of an ``ephemeral/`` key writes anything: it reserves the declared
size (``Content-Length``, or a ``Content-Range`` total) in the ledger, or answers ``507`` with the worker's
message and the setting it would pass (``{"error", "setting"}``, ``Retry-After: 5``); an input of unknown
size (chunked) is a ``411``.

``POST /v1/files/release`` is the one request-scoped release of ephemeral inputs.

Body: ``{"keys": ["ephemeral/<category>/<request id>/<name>", ...]}`` -- the exact keys a request staged.
Each key's file and hash sidecars are deleted and its reservation dropped; a request directory left empty
is removed. Idempotent: a key already gone is fine (it still drops a reservation the key may hold).
Answer: ``200 {"released": [keys deleted], "missing": [keys not there], "freed_bytes": N}``. A key that is
not an ephemeral input key (``models/...``, ``data/...``, ``../``, absolute, through a symlink out of the
root) is a ``400`` and nothing is released: this route can never delete a model file.

The frontend calls it after inference, on error and on client disconnect
(:class:`corral.staging.request_inputs.RequestInputs`); the recovery sweep is the backstop.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from corral.staging import hashing
from corral.staging.content_range import parse_content_range, parse_status_query
from corral.staging.ephemeral_ledger import EphemeralLedger, is_ephemeral_key, resolve_ephemeral_key
from corral.staging.errors import InputStorageFull, KeyEscapesDirectory
from corral.staging.file_server import Answer
from corral.staging.http_body import RequestBody
from corral.staging.path_locks import PathLocks

log = logging.getLogger(__name__)

RELEASE_PATH = "/v1/files/release"
MAX_RELEASE_BODY_BYTES = 1 << 20
MAX_RELEASE_KEYS = 1000


INPUT_FULL_RETRY_AFTER_S = 5


def reserve_input(
    ledger: EphemeralLedger, key: str, content_range: str, content_length: int | None
) -> Answer | None:
    """Reserve a request input's declared size; None when accepted, else the answer refusing it."""
    size_bytes = content_length
    if content_range:
        total = parse_status_query(content_range)
        if total is None:
            try:
                parsed = parse_content_range(content_range)
            except ValueError as exc:
                return Answer.error(400, str(exc))
            total = parsed.total
            if parsed.start > 0 and ledger.holds(key):
                return None  # a later range of an upload that is already reserved
        elif ledger.holds(key):
            return None
        size_bytes = total
    if size_bytes is None:
        return Answer.error(
            411,
            f"request input {key!r} has no Content-Length; an ephemeral input must declare "
            "its size so the worker can reserve it before writing",
        )
    try:
        ledger.reserve(key, size_bytes)
    except InputStorageFull as exc:
        log.warning("%s", exc.message)
        return Answer.json(
            507,
            {"error": exc.message, "setting": exc.setting},
            {"Retry-After": str(INPUT_FULL_RETRY_AFTER_S)},
        )
    return None


def release_inputs(
    body: RequestBody, models_dir: Path, ledger: EphemeralLedger, upload_locks: PathLocks
) -> Answer:
    """Parse a release body and release its keys (see the module docstring)."""
    try:
        keys = _keys(_read_json(body))
        paths = [(key, resolve_ephemeral_key(key, models_dir)) for key in keys]
    except ValueError as exc:
        return Answer.error(400, f"release: {exc}")
    except KeyEscapesDirectory as exc:
        return Answer.error(400, f"release: {exc}")
    released: list[str] = []
    missing: list[str] = []
    freed_bytes = 0
    for key, path in paths:
        with upload_locks.hold(path):  # an upload of this key still running ends first
            removed_bytes = _remove_file(path)
            freed_bytes += ledger.release(key, removed_bytes or 0)
        (released if removed_bytes is not None else missing).append(key)
        _remove_empty(path.parent)
    if released:
        log.info(
            "released %d ephemeral input(s) (%d bytes): %s", len(released), freed_bytes, ", ".join(released)
        )
    return Answer.json(200, {"released": released, "missing": missing, "freed_bytes": freed_bytes})


def _read_json(body: RequestBody) -> object:
    buffer = bytearray(MAX_RELEASE_BODY_BYTES + 1)
    view = memoryview(buffer)
    size = 0
    while size <= MAX_RELEASE_BODY_BYTES:
        count = body.readinto(view[size:])
        if count == 0:
            break
        size += count
    if size > MAX_RELEASE_BODY_BYTES:
        raise ValueError(f"body is larger than {MAX_RELEASE_BODY_BYTES} bytes")
    try:
        return json.loads(bytes(buffer[:size]))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f'body is not JSON ({exc}); send {{"keys": [...]}}') from None


def _keys(payload: object) -> list[str]:
    keys = payload.get("keys") if isinstance(payload, dict) else None
    if not isinstance(keys, list) or not all(isinstance(key, str) for key in keys):
        raise ValueError("'keys' must be a list of strings")
    if len(keys) > MAX_RELEASE_KEYS:
        raise ValueError(f"'keys' lists {len(keys)} keys; the limit is {MAX_RELEASE_KEYS} per call")
    for key in keys:
        if not is_ephemeral_key(key):
            raise ValueError(
                f"key {key!r} is not an ephemeral request input; only 'ephemeral/...' keys are released"
            )
    return list(dict.fromkeys(keys))


def _remove_file(path: Path) -> int | None:
    """Delete ``path`` and its sidecars; its size, or None when there was no file."""
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        hashing.remove_sidecars(path)
        return None
    if os.path.isdir(path) and not os.path.islink(path):
        return None  # a key names a file; a directory under that name is the sweep's business
    os.unlink(path)
    hashing.remove_sidecars(path)
    return info.st_size


def _remove_empty(directory: Path) -> None:
    try:
        os.rmdir(directory)
    except OSError:
        pass  # not empty (other inputs of the request), or already gone
