"""SHA-256 of staged files, streamed, with the reference's sidecar cache files.

Sidecars sit next to the file they describe:

* ``<file>.sha256``        -- ``<64 hex> <size> <mtime_ns> <inode>``: the hash of the complete file as
  this process read or received it, bound to the file's identity when it was hashed. It is trusted
  only while the file still has that size, mtime and inode, so a file changed in place (even with the
  same size) is hashed again, and an unchanged one never is. The reference's bare-hex form is never
  trusted (hashed once more, then rewritten in this form).
* ``<file>.sha256.target`` -- declared final hash of a *partial* (resumable) upload in progress: a
  client's claim, reported as such (``X-Target-SHA256``), never as the file's hash.

Only code that computed a hash from the bytes writes a ``.sha256`` sidecar (:func:`record_hash`);
clients cannot name sidecar keys on a worker's file server (see :mod:`corral.staging.keys`).

All functions are synchronous and block on disk I/O; async callers use ``asyncio.to_thread``.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Callable
from pathlib import Path

HASH_SIDECAR_SUFFIX = ".sha256"
TARGET_SIDECAR_SUFFIX = ".sha256.target"
SHA256_HEX_CHARS = 64
HASH_CHUNK_BYTES = 1 << 20
SIDECAR_MAX_BYTES = 256

ProgressCallback = Callable[[int, int], None]
"""Called as ``on_progress(done_bytes, total_bytes)``."""


def is_sha256_hex(value: str) -> bool:
    """True if ``value`` looks like a hex SHA-256 digest (64 hex characters, any case)."""
    if len(value) != SHA256_HEX_CHARS:
        return False
    try:
        int(value, 16)
    except ValueError:
        return False
    return True


def hash_sidecar_path(path: Path) -> Path:
    return path.with_name(path.name + HASH_SIDECAR_SUFFIX)


def target_sidecar_path(path: Path) -> Path:
    return path.with_name(path.name + TARGET_SIDECAR_SUFFIX)


def is_sidecar_name(name: str) -> bool:
    """True for ``*.sha256`` and ``*.sha256.target`` names (skip them when staging a directory)."""
    return name.endswith(HASH_SIDECAR_SUFFIX) or name.endswith(TARGET_SIDECAR_SUFFIX)


def sha256_file(
    path: Path, *, on_progress: ProgressCallback | None = None, chunk_bytes: int = HASH_CHUNK_BYTES
) -> str:
    """Hex SHA-256 of ``path``, read in ``chunk_bytes`` pieces (memory stays at one chunk)."""
    digest = hashlib.sha256()
    buffer = bytearray(chunk_bytes)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as file:
        total_bytes = os.fstat(file.fileno()).st_size
        done_bytes = 0
        while True:
            read_bytes = file.readinto(buffer)
            if not read_bytes:
                break
            digest.update(view[:read_bytes])
            done_bytes += read_bytes
            if on_progress is not None:
                on_progress(done_bytes, total_bytes)
    return digest.hexdigest()


def read_trusted_hash(path: Path) -> str | None:
    """The recorded hash of ``path`` if its sidecar was recorded for the file as it is now (size,
    mtime and inode all match), else None."""
    try:
        identity = _identity(os.stat(path))
        fields = _read_small_text(hash_sidecar_path(path)).split()
    except OSError:
        return None
    if len(fields) != 4 or not is_sha256_hex(fields[0]):
        return None  # the reference's bare hex, or garbage: not bound to this file's identity
    if tuple(fields[1:]) != tuple(str(value) for value in identity):
        return None
    return fields[0].lower()


def record_hash(path: Path, hash_hex: str, identity: os.stat_result | None = None) -> None:
    """Write ``path``'s ``.sha256`` sidecar, bound to ``identity`` (the file's stat when it was hashed;
    now if None). Only for hashes computed here from the bytes themselves."""
    stat = os.stat(path) if identity is None else identity
    size, mtime_ns, inode = _identity(stat)
    write_sidecar(hash_sidecar_path(path), f"{hash_hex.lower()} {size} {mtime_ns} {inode}")


def read_target_hash(path: Path) -> str | None:
    """The declared final hash of a partial upload (``.sha256.target``), or None if there is none."""
    try:
        value = _read_small_text(target_sidecar_path(path))
    except OSError:
        return None
    return value.lower() if is_sha256_hex(value) else None


def write_sidecar(sidecar: Path, hash_hex: str) -> None:
    """Atomically replace ``sidecar`` with ``hash_hex`` (never follows an existing symlink there).

    Use :func:`record_hash` for ``.sha256`` sidecars; this raw form is for ``.sha256.target``."""
    temp = sidecar.with_name(f".{sidecar.name}.{secrets.token_hex(6)}.tmp")
    try:
        fd = os.open(temp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o640)
        with os.fdopen(fd, "w", encoding="ascii") as file:
            file.write(hash_hex)
        os.replace(temp, sidecar)
    finally:
        _unlink_quietly(temp)


def remove_sidecars(path: Path) -> None:
    """Delete both sidecars of ``path`` if present."""
    _unlink_quietly(hash_sidecar_path(path))
    _unlink_quietly(target_sidecar_path(path))


def cached_sha256(path: Path, on_progress: ProgressCallback | None = None, record: bool = True) -> str:
    """Hex SHA-256 of ``path``, from its ``.sha256`` sidecar when it matches the file, else hashed and
    recorded (so staging a file that did not change costs a stat, not a re-hash).

    The sidecar is written only if ``record`` and the file did not change while it was hashed; failures to
    write it (read-only directory, full disk) are ignored -- the hash is still returned.
    """
    cached = read_trusted_hash(path)
    if cached is not None:
        if on_progress is not None:
            size_bytes = os.stat(path).st_size
            on_progress(size_bytes, size_bytes)
        return cached
    before = os.stat(path)
    hash_hex = sha256_file(path, on_progress=on_progress)
    try:
        if record and _identity(os.stat(path)) == _identity(before):
            record_hash(path, hash_hex, before)
    except OSError:
        pass
    return hash_hex


def _identity(stat: os.stat_result) -> tuple[int, int, int]:
    """What a recorded hash is bound to: size, mtime (ns) and inode."""
    return (stat.st_size, stat.st_mtime_ns, stat.st_ino)


def _read_small_text(path: Path) -> str:
    with open(path, "rb") as file:
        return file.read(SIDECAR_MAX_BYTES).decode("ascii", errors="replace").strip()


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
