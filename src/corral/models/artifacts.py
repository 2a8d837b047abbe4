"""The local files a model needs besides its main file, and how to enumerate them for staging.

YAML fields (top level of a model config, like LocalAI's): ``mmproj``, ``draft_model``,
``lora_adapter``, ``lora_adapters`` (list), ``lora_base``, ``tokenizer``, ``clip_model``,
``audio_path``. Values are paths, absolute or relative to the models dir (or to the snapshot of a
managed Hugging Face model). ``options`` entries ``key:value`` whose value names an existing file or
directory are staged too. Every such path stays inside the model's roots (:mod:`corral.models.roots`).

Each path is reported with the ``ModelOptions`` field it fills, so the stager can rewrite it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# YAML key -> ModelOptions field (scalar string fields).
SCALAR_FIELDS: dict[str, str] = {
    "mmproj": "MMProj",
    "draft_model": "DraftModel",
    "lora_adapter": "LoraAdapter",
    "lora_base": "LoraBase",
    "tokenizer": "Tokenizer",
    "clip_model": "CLIPModel",
    "audio_path": "AudioPath",
}
REPEATED_FIELD = "LoraAdapters"
SIDECAR_SUFFIXES = (".sha256", ".sha256.target")
# A companion file travels with its main file: a piper voice `x.onnx` needs `x.onnx.json`.
COMPANION_SUFFIXES = {".onnx": ".json"}


@dataclass(frozen=True)
class ArtifactPaths:
    scalars: tuple[tuple[str, str], ...] = ()  # (ModelOptions field, configured path)
    lora_adapters: tuple[str, ...] = ()


@dataclass(frozen=True)
class StagedPath:
    """One configured local path and the ModelOptions field it fills ('' = staged only)."""

    field: str
    path: Path


def parse_artifacts(data: dict[str, Any], source: Path) -> ArtifactPaths:
    scalars = []
    for yaml_key, proto_field in SCALAR_FIELDS.items():
        value = data.get(yaml_key)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise ValueError(f"{source}: field {yaml_key!r} must be a path string, got {value!r}")
        scalars.append((proto_field, value.strip()))
    adapters = data.get("lora_adapters") or []
    if not isinstance(adapters, list) or not all(isinstance(a, str) for a in adapters):
        raise ValueError(f"{source}: field 'lora_adapters' must be a list of paths, got {adapters!r}")
    return ArtifactPaths(tuple(scalars), tuple(a.strip() for a in adapters if a.strip()))


def resolve_local(value: str, roots: Iterable[Path]) -> Path | None:
    """``value`` as an existing local path: absolute, else relative to the first root that has it."""
    if not value or "\x00" in value:
        return None
    path = Path(value)
    if path.is_absolute():
        return path if os.path.exists(path) else None  # False for a name the system refuses (too long)
    for root in roots:
        candidate = root / path
        if os.path.exists(candidate):
            return candidate
    return None


def option_path(option: str, roots: list[Path], models_dir: Path) -> Path | None:
    """The existing file/dir an ``options`` entry ``key:value`` names, if any (never the models dir itself)."""
    _, sep, value = option.partition(":")
    if not sep:
        return None
    path = resolve_local(value.strip(), roots)
    if path is None:
        return None
    resolved, base = Path(os.path.abspath(path)), Path(os.path.abspath(models_dir))
    if resolved == base or resolved in base.parents or resolved == Path(resolved.anchor):
        return None  # "dir:." or "/" would stage the whole models dir or disk
    return path


def expand_files(paths: Iterable[Path]) -> list[Path]:
    """Every file to stage for ``paths``: files plus their companions, directories file by file.

    Hash sidecars that sit next to the file they describe are skipped; order is stable, no duplicates.
    """
    seen: set[Path] = set()
    files: list[Path] = []

    def add(path: Path) -> None:
        if path not in seen and path.is_file():
            seen.add(path)
            files.append(path)

    for path in paths:
        if path.is_dir():
            for child in sorted(p for p in path.rglob("*") if p.is_file()):
                if not _is_sidecar_of_real_file(child):
                    add(child)
        else:
            add(path)
            companion = COMPANION_SUFFIXES.get(path.suffix)
            if companion is not None:
                add(path.with_name(path.name + companion))
    return files


def _is_sidecar_of_real_file(path: Path) -> bool:
    for suffix in SIDECAR_SUFFIXES:
        if path.name.endswith(suffix) and path.with_name(path.name[: -len(suffix)]).is_file():
            return True
    return False
