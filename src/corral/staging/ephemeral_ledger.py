"""The worker's capacity ledger for ephemeral request inputs (the specification's "Ephemeral request-input
storage").

A request that carries a file (an audio clip, an image) stages it under the key
``ephemeral/<category>/<request id>/<name>``; it lands below the worker's ephemeral root
``<models_dir>/../staging/ephemeral/``. In S3 mode ``files.ensure`` fetches such a key into the same
directory (the worker's S3 cache resolves keys as HTTP staging does), so one root covers both of the
specification's roots; the ledger and the sweep take any number of roots all the same.

Before the first byte of an input is written the ledger *reserves* its declared size, and refuses it when

* the bytes held by inputs not yet released, plus this one, would pass the byte limit
  (``LOCALAI_EPHEMERAL_STAGING_BYTE_LIMIT``), or
* the filesystem's free space, minus what accepted inputs have still to write, minus this one, would drop
  below the headroom (``LOCALAI_EPHEMERAL_STAGING_MIN_FREE_BYTES``).

A reservation lasts until the request releases its exact keys (``POST /v1/files/release``); its request
directory is *active* until then and the recovery sweep (:mod:`corral.staging.ephemeral_sweep`) keeps it.
Reservations live in memory: after a worker restart the inputs on disk are counted as unreserved bytes
(found by the start-up sweep) until they are released or swept. A reservation nobody released for
:data:`RESERVATION_ABANDON_AFTER_S` (its frontend died) stops protecting its directory.

Keys outside ``ephemeral/`` are not touched by any of this.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from corral.config.sizes import GIB, format_size
from corral.staging.disk_space import FreeBytesProbe, statvfs_free_bytes
from corral.staging.errors import InputStorageFull, KeyEscapesDirectory
from corral.staging.keys import EPHEMERAL_KEY_PREFIX, resolve_key, staging_dir

BYTE_LIMIT_SETTING = "LOCALAI_EPHEMERAL_STAGING_BYTE_LIMIT"
MIN_FREE_SETTING = "LOCALAI_EPHEMERAL_STAGING_MIN_FREE_BYTES"

# Defaults when a setting is 0, from the size of the filesystem holding the ephemeral root: inputs may take
# a tenth of it, and must leave a twentieth of it free (never less than 1 GiB: a backend's own state, logs and
# the next model file need room; never more than 10 GiB: a large volume should not refuse a 5 MB clip).
DEFAULT_BYTE_LIMIT_FRACTION = 0.10
DEFAULT_BYTE_LIMIT_FLOOR_BYTES = 256 << 20
DEFAULT_MIN_FREE_FRACTION = 0.05
DEFAULT_MIN_FREE_FLOOR_BYTES = 1 * GIB
DEFAULT_MIN_FREE_CAP_BYTES = 10 * GIB

RESERVATION_ABANDON_AFTER_S = 6 * 3600.0
"""A reservation nobody released for this long belongs to a frontend that died: it stops keeping its
request directory from the sweep and stops counting (a request's inference never holds its input that long)."""

TotalBytesProbe = Callable[[Path], int]


def statvfs_total_bytes(path: Path) -> int:
    stat = os.statvfs(path)
    return stat.f_blocks * stat.f_frsize


def ephemeral_root(models_dir: Path) -> Path:
    """``<models_dir>/../staging/ephemeral``: where every ``ephemeral/`` key lands (HTTP staging and S3 cache)."""
    return staging_dir(models_dir) / EPHEMERAL_KEY_PREFIX.rstrip("/")


def is_ephemeral_key(key: str) -> bool:
    return key == EPHEMERAL_KEY_PREFIX.rstrip("/") or key.startswith(EPHEMERAL_KEY_PREFIX)


def request_dir_of(key: str) -> str:
    """``<category>/<request id>`` of an ephemeral key; raises :class:`KeyEscapesDirectory` for any other shape.

    Every file below the ephemeral root belongs to one request directory, so the ledger and the sweep
    account for all of it.
    """
    parts = key.split("/")
    if parts[0] != EPHEMERAL_KEY_PREFIX.rstrip("/") or len(parts) < 4 or not all(parts[1:]):
        raise KeyEscapesDirectory(key, "an ephemeral key must be 'ephemeral/<category>/<request id>/<name>'")
    return f"{parts[1]}/{parts[2]}"


def resolve_ephemeral_key(key: str, models_dir: Path) -> Path:
    """The worker path of an ephemeral input key, which must stay below the ephemeral root once symlinks are
    resolved (not merely below the staging directory); raises :class:`KeyEscapesDirectory` otherwise."""
    request_dir_of(key)
    path = resolve_key(key, models_dir)
    real_root = os.path.realpath(ephemeral_root(models_dir))
    if not os.path.realpath(path).startswith(real_root.rstrip(os.sep) + os.sep):
        raise KeyEscapesDirectory(
            key,
            f"resolves to {os.path.realpath(path)!r}, outside the ephemeral root "
            f"{real_root!r} (a symlink points out of it)",
        )
    return path


@dataclass(frozen=True)
class EphemeralLimits:
    """The two capacity settings, resolved (0 in a setting is already replaced by its default here)."""

    byte_limit: int
    min_free_bytes: int

    @classmethod
    def resolve(
        cls,
        byte_limit: int,
        min_free_bytes: int,
        root: Path,
        total_bytes: TotalBytesProbe = statvfs_total_bytes,
    ) -> EphemeralLimits:
        """Positive settings as they are; 0 (or less) selects the filesystem-based default for ``root``."""
        if byte_limit > 0 and min_free_bytes > 0:
            return cls(byte_limit, min_free_bytes)
        size = total_bytes(_existing_ancestor(root))
        if byte_limit <= 0:
            byte_limit = max(DEFAULT_BYTE_LIMIT_FLOOR_BYTES, int(size * DEFAULT_BYTE_LIMIT_FRACTION))
        if min_free_bytes <= 0:
            min_free_bytes = min(
                DEFAULT_MIN_FREE_CAP_BYTES,
                max(DEFAULT_MIN_FREE_FLOOR_BYTES, int(size * DEFAULT_MIN_FREE_FRACTION)),
            )
        return cls(byte_limit, min_free_bytes)

    def describe(self) -> str:
        return (
            f"{BYTE_LIMIT_SETTING}={self.byte_limit} ({format_size(self.byte_limit)}), "
            f"{MIN_FREE_SETTING}={self.min_free_bytes} ({format_size(self.min_free_bytes)})"
        )


@dataclass
class _Hold:
    size_bytes: int
    request_dir: str
    reserved_at_s: float
    landed: bool = False  # the file is on disk: the filesystem's free space already shows it


class EphemeralLedger:
    """Reservations of ephemeral inputs by exact key; thread-safe (the file server's threads and the worker's
    event loop both use it)."""

    def __init__(
        self,
        root: Path,
        limits: EphemeralLimits,
        *,
        free_bytes: FreeBytesProbe = statvfs_free_bytes,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = root
        self.limits = limits
        self._free_bytes = free_bytes
        self._clock = clock
        self._lock = threading.Lock()
        self._holds: dict[str, _Hold] = {}
        self._unreserved: dict[str, int] = {}  # request dir -> bytes on disk that no reservation covers

    def reserve(self, key: str, size_bytes: int) -> None:
        """Hold ``size_bytes`` for ``key`` (replacing its earlier hold), or raise :class:`InputStorageFull`."""
        request_dir = request_dir_of(key)
        size_bytes = max(0, size_bytes)
        with self._lock:
            previous = self._holds.get(key)
            held = self._held_bytes_locked() - (previous.size_bytes if previous else 0)
            if held + size_bytes > self.limits.byte_limit:
                raise InputStorageFull(
                    _over_limit(key, size_bytes, held, self._request_count_locked(), self.limits.byte_limit),
                    setting=BYTE_LIMIT_SETTING,
                    key=key,
                )
            free = self._free_bytes(_existing_ancestor(self.root))
            pending = sum(
                hold.size_bytes for name, hold in self._holds.items() if not hold.landed and name != key
            )
            if free - pending - size_bytes < self.limits.min_free_bytes:
                raise InputStorageFull(
                    _under_headroom(key, size_bytes, free, pending, self.limits.min_free_bytes, self.root),
                    setting=MIN_FREE_SETTING,
                    key=key,
                )
            self._holds[key] = _Hold(size_bytes, request_dir, self._clock())

    def settle(self, key: str, on_disk: bool) -> None:
        """After a write of ``key`` ended: keep its hold if the file is there (landed), else drop it."""
        with self._lock:
            hold = self._holds.get(key)
            if hold is None:
                return
            if on_disk:
                hold.landed = True
            else:
                del self._holds[key]

    def holds(self, key: str) -> bool:
        with self._lock:
            return key in self._holds

    def release(self, key: str, removed_bytes: int) -> int:
        """Drop ``key``'s hold after its file (``removed_bytes`` on disk) was deleted; returns bytes it freed."""
        request_dir = request_dir_of(key)
        with self._lock:
            hold = self._holds.pop(key, None)
            if hold is not None:
                return hold.size_bytes
            left = self._unreserved.get(request_dir, 0) - removed_bytes
            if left > 0:
                self._unreserved[request_dir] = left
            else:
                self._unreserved.pop(request_dir, None)
            return removed_bytes

    def active_request_dirs(self) -> set[str]:
        """``<category>/<request id>`` of every request holding a reservation (the sweep keeps them)."""
        with self._lock:
            return {hold.request_dir for hold in self._holds.values()}

    def drop_abandoned(self) -> list[str]:
        """Forget holds nobody released for :data:`RESERVATION_ABANDON_AFTER_S`; returns their keys."""
        cutoff = self._clock() - RESERVATION_ABANDON_AFTER_S
        with self._lock:
            abandoned = [key for key, hold in self._holds.items() if hold.reserved_at_s < cutoff]
            for key in abandoned:
                del self._holds[key]
            return abandoned

    def count_unreserved(self, bytes_by_request_dir: dict[str, int]) -> None:
        """What the sweep found on disk and kept without a reservation (inputs of an earlier run)."""
        with self._lock:
            held = {hold.request_dir for hold in self._holds.values()}
            self._unreserved = {
                name: size for name, size in bytes_by_request_dir.items() if size > 0 and name not in held
            }

    def held_bytes(self) -> int:
        with self._lock:
            return self._held_bytes_locked()

    def _held_bytes_locked(self) -> int:
        return sum(hold.size_bytes for hold in self._holds.values()) + sum(self._unreserved.values())

    def _request_count_locked(self) -> int:
        return len({hold.request_dir for hold in self._holds.values()} | set(self._unreserved))


def _existing_ancestor(path: Path) -> Path:
    """``path`` or its nearest existing parent (the root may not exist before the first input)."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def _over_limit(key: str, size: int, held: int, requests: int, limit: int) -> str:
    return (
        f"request input {key!r} ({size} bytes) refused before it was written: the worker's ephemeral "
        f"request inputs would reach {held + size} bytes ({held} held by {requests} request(s) not yet "
        f"released), over {BYTE_LIMIT_SETTING}={limit} ({format_size(limit)}); retry when requests finish, "
        f"raise {BYTE_LIMIT_SETTING} on the worker, or add workers"
    )


def _under_headroom(key: str, size: int, free: int, pending: int, keep_free: int, root: Path) -> str:
    left = free - pending - size
    return (
        f"request input {key!r} ({size} bytes) refused before it was written: it would leave {left} bytes "
        f"free on the filesystem of {str(root)!r} ({free} free now, {pending} still to be written by accepted "
        f"inputs), below {MIN_FREE_SETTING}={keep_free} ({format_size(keep_free)}); free space on the "
        f"worker or lower {MIN_FREE_SETTING}"
    )
