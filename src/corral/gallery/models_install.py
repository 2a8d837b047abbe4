"""Installing a gallery model's files into the models directory (blocking: run in a thread).

Every file is checked before anything is fetched (`plan_files`): its name is a plain file name
(models_index.file_name_problem), its uri http(s) or inside a configured local gallery's folder. Each
download is written to `.gallery-<job>-<n>.part` beside its target (opened O_EXCL|O_NOFOLLOW), its
SHA-256 computed on the way; a mismatch, a size past CORRAL_MODEL_GALLERY_MAX_DOWNLOAD or a read error
deletes the partial file and fails the install naming the file. Only a verified file is renamed into
place, and never over a symlink. A file already present with the expected digest is not fetched again.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.config.model_gallery import DOWNLOAD_MAX_KNOB
from corral.gallery import fetch
from corral.gallery.models_index import (
    GalleryModel,
    LocationRefused,
    fetch_problem,
    file_location,
    file_name_problem,
)

PART_PREFIX = ".gallery-"
PART_SUFFIX = ".part"

FileProgress = Callable[[str, int, int], None]  # (file name, bytes so far, total or 0)


class InstallError(Exception):
    """A gallery install cannot proceed; `field` names the index or request field at fault."""

    def __init__(self, message: str, field: str = "id") -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class PlannedFile:
    index: int
    filename: str
    location: str
    sha256: str
    size: int


def plan_files(model: GalleryModel, roots: list[Path]) -> list[PlannedFile]:
    """The entry's files, each checked; InstallError naming `files[<n>].<field>` for the first bad one."""
    planned: list[PlannedFile] = []
    seen: set[str] = set()
    for i, item in enumerate(model.entry.files):
        problem = file_name_problem(item.filename)
        if problem is not None:
            raise InstallError(f"{model.id}: field 'files[{i}].filename' {problem}", f"files[{i}].filename")
        if item.filename in seen:
            raise InstallError(
                f"{model.id}: field 'files[{i}].filename' {item.filename!r} is listed twice",
                f"files[{i}].filename",
            )
        seen.add(item.filename)
        try:
            location = file_location(model.gallery, item.uri, roots)
        except LocationRefused as exc:
            raise InstallError(f"{model.id}: field 'files[{i}].uri' {exc}", f"files[{i}].uri") from None
        planned.append(PlannedFile(i, item.filename, location, item.sha256, item.size_bytes()))
    return planned


def check_targets(planned: list[PlannedFile], models_dir: Path) -> None:
    """Refuse, before the job starts, a destination that is a symlink (checked again before each rename)."""
    for item in planned:
        _target(models_dir, item)


def part_path(models_dir: Path, job_id: str, index: int) -> Path:
    return models_dir / f"{PART_PREFIX}{job_id}-{index}{PART_SUFFIX}"


def remove_parts(models_dir: Path, job_id: str) -> None:
    """Delete what a job left half-written (its frontend stopped mid download)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(models_dir):
            if entry.name.startswith(f"{PART_PREFIX}{job_id}-") and entry.name.endswith(PART_SUFFIX):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(fetch.CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _target(models_dir: Path, planned: PlannedFile) -> Path:
    target = models_dir / planned.filename
    if target.is_symlink():
        raise InstallError(
            f"field 'files[{planned.index}].filename': {planned.filename!r} is a symlink in the models "
            "directory; refused (remove it to install)",
            f"files[{planned.index}].filename",
        )
    if target.parent != models_dir:  # file_name_problem already refused separators: a last guard
        raise InstallError(f"field 'files[{planned.index}].filename' is outside the models directory")
    return target


def download_file(
    planned: PlannedFile,
    models_dir: Path,
    job_id: str,
    timeout_s: float,
    max_bytes: int,
    progress: FileProgress,
) -> None:
    """Fetch one file into the models directory (verified, then renamed into place)."""
    target = _target(models_dir, planned)
    if planned.sha256 and target.is_file() and _digest(target) == planned.sha256:
        size = target.stat().st_size
        progress(planned.filename, size, size)
        return
    part = part_path(models_dir, job_id, planned.index)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(part, flags, 0o644)
    try:
        with os.fdopen(fd, "wb") as out:
            digest = fetch.download(
                planned.location,
                out,
                timeout_s,
                max_bytes,
                lambda done, total: progress(planned.filename, done, total or planned.size),
            )
        if planned.sha256 and digest != planned.sha256:
            raise InstallError(
                f"{planned.filename}: sha256 mismatch (expected {planned.sha256}, got {digest}); the "
                "downloaded file was deleted",
                f"files[{planned.index}].sha256",
            )
        os.replace(part, _target(models_dir, planned))
    except fetch.FetchError as exc:
        with contextlib.suppress(OSError):
            os.unlink(part)
        raise InstallError(
            f"{planned.filename}: {fetch_problem(exc, DOWNLOAD_MAX_KNOB)}", f"files[{planned.index}].uri"
        ) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(part)
        raise


def merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Overrides merged recursively over a config (mappings merge; anything else replaces)."""
    out = dict(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def model_config(
    model: GalleryModel, name: str, overrides: dict[str, Any], base: dict[str, Any]
) -> dict[str, Any]:
    """The config to commit: base (the entry's `url`), config_file, the entry's and the request's overrides;
    named `name`, its model file the first downloaded one when the config names none."""
    config = merge(merge(merge(base, model.entry.config_file), model.entry.overrides), overrides)
    config["name"] = name
    params = config.get("parameters")
    if model.entry.files and not (isinstance(params, dict) and params.get("model")):
        config["parameters"] = {
            **(params if isinstance(params, dict) else {}),
            "model": model.entry.files[0].filename,
        }
    return config
