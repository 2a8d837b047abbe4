"""LoadModel opens files only under the worker's models directory.

The worker passes its models directory to every backend process it starts
(``CORRAL_BACKEND_MODELS_ROOT``). A ``ModelOptions`` path field, or an ``Options``/``Overrides`` entry
``key:value`` whose value names a file, that resolves outside it -- by an absolute path, ``..`` segments,
a ``ModelPath`` elsewhere or a symlink -- is refused before the engine sees it, so a forged or mistaken
LoadModel cannot make a backend read an arbitrary file of the worker. A relative value that names no
existing file below ``ModelPath`` (``chat_format:gemma``, a hub id) is no path and passes. A backend
started by hand without the variable keeps the old behaviour (any path).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from corral.proto import backend_pb2 as pb

MODELS_ROOT_ENV = "CORRAL_BACKEND_MODELS_ROOT"
# ModelOptions fields that name files besides ModelFile/ModelPath (see models/artifacts.py).
PATH_FIELDS = ("MMProj", "DraftModel", "LoraAdapter", "LoraBase", "Tokenizer", "CLIPModel", "AudioPath")


def models_root_from_env(env: Mapping[str, str] | None = None) -> Path | None:
    raw = (os.environ if env is None else env).get(MODELS_ROOT_ENV, "").strip()
    return Path(raw) if raw else None


def outside_root(opts: pb.ModelOptions, root: Path) -> str | None:
    """Why ``opts`` may not be loaded under ``root`` (naming the field and path), or None."""
    real_root = os.path.realpath(root)
    for field, value in _path_fields(opts):
        if "\x00" in value:
            return f"LoadModel {field} {value!r} contains a NUL byte"
        real = os.path.realpath(_anchored(value, opts.ModelPath, field))
        if real != real_root and not real.startswith(real_root.rstrip(os.sep) + os.sep):
            return (
                f"LoadModel {field} {value!r} resolves to {real!r}, outside this worker's models "
                f"directory {real_root!r} ({MODELS_ROOT_ENV}); backends only open files under it"
            )
    return None


def path_outside_root(path: Path, root: Path) -> str | None:
    """Why an engine may not open ``path`` (already resolved from the options), or None."""
    real, real_root = os.path.realpath(path), os.path.realpath(root)
    if real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep):
        return None
    return (
        f"model file {str(path)!r} resolves to {real!r}, outside this worker's models directory "
        f"{real_root!r} ({MODELS_ROOT_ENV}); backends only open files under it"
    )


def _path_fields(opts: pb.ModelOptions) -> Iterator[tuple[str, str]]:
    # ModelPath alone is not checked: models without files carry the frontend's directory there and
    # open nothing through it; an engine that opens ModelPath/Model checks that path itself.
    if opts.ModelFile:
        yield "ModelFile", opts.ModelFile
    for field in PATH_FIELDS:
        value = getattr(opts, field)
        if _names_file(value, opts.ModelPath):
            yield field, value  # a bare name may be an identifier, not a file
    for value in opts.LoraAdapters:
        if _names_file(value, opts.ModelPath):
            yield "LoraAdapters", value
    for name in ("Options", "Overrides"):
        for index, option in enumerate(getattr(opts, name)):
            _, sep, value = option.partition(":")
            if sep and _names_file(value.strip(), opts.ModelPath):
                yield f"{name}[{index}]", value.strip()


def _names_file(value: str, model_path: str) -> bool:
    """An absolute or ``..`` path, or a relative one that exists below ``model_path``: a file, whatever else."""
    if not value:
        return False
    if os.path.isabs(value) or ".." in Path(value).parts or "\x00" in value:
        return True
    return os.path.lexists(_anchored(value, model_path, ""))  # False for a name the system refuses


def _anchored(value: str, model_path: str, field: str) -> str:
    if os.path.isabs(value) or not model_path:
        return value
    return os.path.join(model_path, value)


# Issue 23: a request's own files (an audio clip to transcribe, where to write speech or an image) live in the
# worker's staging directory, `<models>/../staging` (HTTP staging and the S3 cache; `ephemeral/` below it).
REQUEST_FILE_FIELDS = {
    "TranscriptRequest": ("dst",),
    "TTSRequest": ("dst",),
    "GenerateImageRequest": ("dst", "src"),
}


def request_files_problem(request: object, root: Path) -> str | None:
    """Why a modality request may not be served under models root `root` (a file outside the worker's staging
    directory), or None. Fields left empty are not checked."""
    staging = os.path.realpath(Path(os.path.abspath(root)).parent / "staging")
    for field in REQUEST_FILE_FIELDS.get(type(request).__name__, ()):
        value = getattr(request, field)
        if not value:
            continue
        real = os.path.realpath(value) if "\x00" not in value else ""
        if not real.startswith(staging.rstrip(os.sep) + os.sep):
            return (
                f"{type(request).__name__}.{field} {value!r} is outside this worker's staging directory "
                f"{staging!r}; a request's files are staged there by the worker (ephemeral/ inputs, temp outputs)"
            )
    return None
