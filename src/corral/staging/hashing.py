"""SHA-256 of staged files, streamed, with the reference's sidecar cache files.

Sidecars sit next to the file they describe and hold 64 lowercase hex characters, no newline:

* ``<file>.sha256``        -- hash of the complete file; trusted only if its mtime >= the file's mtime.
* ``<file>.sha256.target`` -- declared final hash of a *partial* (resumable) upload in progress.

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
    """The cached hash of ``path`` if its ``.sha256`` sidecar is valid and not older than the file."""
    sidecar = hash_sidecar_path(path)
    try:
        file_mtime_ns = os.stat(path).st_mtime_ns
        if os.stat(sidecar).st_mtime_ns < file_mtime_ns:
            return None
        value = _read_small_text(sidecar)
    except OSError:
        return None
    return value.lower() if is_sha256_hex(value) else None


def read_target_hash(path: Path) -> str | None:
    """The declared final hash of a partial upload (``.sha256.target``), or None if there is none."""
    try:
        value = _read_small_text(target_sidecar_path(path))
    except OSError:
        return None
    return value.lower() if is_sha256_hex(value) else None


def write_sidecar(sidecar: Path, hash_hex: str) -> None:
    """Atomically replace ``sidecar`` with ``hash_hex`` (never follows an existing symlink there)."""
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


def cached_sha256(path: Path, on_progress: ProgressCallback | None = None) -> str:
    """Hex SHA-256 of ``path``, from its ``.sha256`` sidecar when fresh, else hashed and cached.

    The sidecar is written only if the file did not change while it was hashed; failures to write
    it (read-only directory, full disk) are ignored -- the hash is still returned.
    """
    cached = read_trusted_hash(path)
    if cached is not None:
        if on_progress is not None:
            size_bytes = os.stat(path).st_size
            on_progress(size_bytes, size_bytes)
        return cached
    before = _identity(os.stat(path))
    hash_hex = sha256_file(path, on_progress=on_progress)
    try:
        if _identity(os.stat(path)) == before:
            write_sidecar(hash_sidecar_path(path), hash_hex)
    except OSError:
        pass
    return hash_hex


def _identity(stat: os.stat_result) -> tuple[int, int, int, int]:
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


def _read_small_text(path: Path) -> str:
    with open(path, "rb") as file:
        return file.read(SHA256_HEX_CHARS + 8).decode("ascii", errors="replace").strip()


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
