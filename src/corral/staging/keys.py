"""Storage keys: how a frontend names a staged file and where a worker puts it.

A key is a relative, '/'-separated path. Its first segment picks the worker directory it lands in
(reference §6.4):

* ``models/<rest>``  -> ``<models_dir>/<rest>``
* ``data/<rest>``    -> ``<models_dir>/../data/<rest>``
* anything else (``ephemeral/...`` included) -> ``<models_dir>/../staging/<key>``

Keys that name the worker's own metadata (hash sidecars, uploads in progress) are refused with
:class:`ReservedKey`: a client must not plant a hash for bytes that do not have it.

Pure functions except for the symlink check in :func:`resolve_key`, which reads the filesystem.
"""

from __future__ import annotations

import os
from pathlib import Path

from corral.models.roots import ModelRoots
from corral.staging.errors import KeyEscapesDirectory, ReservedKey
from corral.staging.hashing import is_sidecar_name

MODELS_KEY_PREFIX = "models/"
DATA_KEY_PREFIX = "data/"
EPHEMERAL_KEY_PREFIX = "ephemeral/"
MAX_KEY_CHARS = 1024
MAX_SEGMENT_BYTES = 255  # NAME_MAX of common Linux filesystems
TEMP_SUFFIXES = (".upload", ".tmp")  # hidden files of uploads / sidecar writes in progress


def storage_key(tracking_key: str, local_path: Path, roots: ModelRoots, anchor: Path | None = None) -> str:
    """Key for a frontend-local file: ``models/<tracking_key>/<key_relative(...)>``."""
    return f"{MODELS_KEY_PREFIX}{tracking_key}/{key_relative(local_path, roots, anchor)}"


def key_relative(local_path: Path, roots: ModelRoots, anchor: Path | None = None) -> str:
    """The key of a frontend-local file below ``models/<tracking_key>/``.

    Under the models directory: its path relative to it, compared lexically like the reference's
    ``filepath.Rel`` (``a/../b`` is ``b``). Elsewhere inside the roots (``CORRAL_MODEL_PATH_ROOTS``): its path
    below the configured ``anchor`` (the file or directory the config names), under the anchor's own name, so
    two files of one name in different directories cannot collide. A file outside every root -- by path or by
    symlink -- raises :class:`~corral.models.roots.PathOutsideRoots`: never a basename of an arbitrary file.
    """
    roots.require("staged file", Path(local_path))
    local = Path(os.path.abspath(local_path))
    try:
        relative = local.relative_to(os.path.abspath(roots.models_dir)).as_posix()
    except ValueError:
        relative = ""
    if relative not in ("", "."):
        return relative
    base = Path(os.path.abspath(anchor)) if anchor is not None else local
    try:
        inner = local.relative_to(base).as_posix()
    except ValueError:
        inner = "."
    return base.name if inner == "." else f"{base.name}/{inner}"


def data_dir(models_dir: Path) -> Path:
    """Worker directory for ``data/`` keys: ``<models_dir>/../data`` (lexical parent)."""
    return Path(os.path.abspath(models_dir)).parent / "data"


def staging_dir(models_dir: Path) -> Path:
    """Worker directory for ``ephemeral/`` and unprefixed keys: ``<models_dir>/../staging``."""
    return Path(os.path.abspath(models_dir)).parent / "staging"


def base_dir_for_key(key: str, models_dir: Path) -> tuple[Path, str]:
    """Split ``key`` into (absolute base directory, path relative to it), without validating."""
    if key.startswith(MODELS_KEY_PREFIX):
        return Path(os.path.abspath(models_dir)), key[len(MODELS_KEY_PREFIX) :]
    if key.startswith(DATA_KEY_PREFIX):
        return data_dir(models_dir), key[len(DATA_KEY_PREFIX) :]
    return staging_dir(models_dir), key


def resolve_key(key: str, models_dir: Path) -> Path:
    """Absolute worker path for ``key``; raises :class:`KeyEscapesDirectory` for unsafe keys.

    Rejected: empty keys, absolute paths, empty / '.' / '..' segments, NUL or backslash characters, and
    keys whose path leaves the base directory once existing symlinks are resolved. The returned path is
    lexical (``<base>/<rest>``), so it matches what the worker was configured with.
    """
    base, relative = _split_checked(key, models_dir)
    candidate = base.joinpath(*relative.split("/"))
    real_base = os.path.realpath(base)
    real_candidate = os.path.realpath(candidate)
    if not real_candidate.startswith(real_base.rstrip(os.sep) + os.sep):
        raise KeyEscapesDirectory(
            key, f"resolves to {real_candidate!r}, outside {real_base!r} (a symlink points out of it)"
        )
    return candidate


def validate_key(key: str) -> None:
    """Raise :class:`KeyEscapesDirectory` if ``key`` is malformed (pure check, no filesystem access).

    Frontends call this before uploading so a bad key fails locally with the same message the worker
    would give; :func:`resolve_key` additionally checks symlinks on the worker.
    """
    _split_checked(key, Path("/models"))


def _split_checked(key: str, models_dir: Path) -> tuple[Path, str]:
    _reject_malformed(key)
    base, relative = base_dir_for_key(key, models_dir)
    _reject_malformed_segments(key, relative)
    return base, relative


def is_reserved_name(name: str) -> bool:
    """True for names of the worker's own metadata: hash sidecars and hidden in-progress files."""
    return is_sidecar_name(name) or (name.startswith(".") and name.endswith(TEMP_SUFFIXES))


def _reject_malformed(key: str) -> None:
    if not key:
        raise KeyEscapesDirectory(key, "key is empty")
    if len(key) > MAX_KEY_CHARS:
        raise KeyEscapesDirectory(
            key[:64] + "...", f"key is {len(key)} characters long; the limit is {MAX_KEY_CHARS}"
        )
    if "\x00" in key:
        raise KeyEscapesDirectory(key, "key contains a NUL byte")
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in key):
        raise KeyEscapesDirectory(key, "key contains a control character")
    if "\\" in key:
        raise KeyEscapesDirectory(key, "key contains a backslash; use '/' as the separator")
    if key.startswith("/"):
        raise KeyEscapesDirectory(key, "key is an absolute path; keys are relative to the worker's dirs")


def _reject_malformed_segments(key: str, relative: str) -> None:
    for segment in relative.split("/"):
        if segment == "":
            raise KeyEscapesDirectory(key, "key has an empty path segment ('//' or a trailing '/')")
        if segment in (".", ".."):
            raise KeyEscapesDirectory(key, f"key has a {segment!r} path segment")
        size_bytes = len(segment.encode("utf-8", errors="surrogateescape"))
        if size_bytes > MAX_SEGMENT_BYTES:
            raise KeyEscapesDirectory(
                key,
                f"a path segment is {size_bytes} bytes long; the limit is "
                f"{MAX_SEGMENT_BYTES} (the filesystem's longest name)",
            )
        if is_reserved_name(segment):
            raise ReservedKey(
                key,
                f"{segment!r} is a name reserved for the worker's own metadata (hash "
                "sidecars '*.sha256', '*.sha256.target' and hidden '.*.upload' / '.*.tmp' "
                "files of uploads in progress); clients can neither write nor read it",
            )
