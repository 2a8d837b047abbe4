"""Managed Hugging Face artifacts: the ``huggingface:`` block of a model config and where its snapshot lives.

    name: tiny
    backend: llama-cpp
    huggingface:
      repo: acme/tiny-gguf          # required
      revision: main                # branch, tag or commit; default main
      include: ["*.gguf"]           # optional glob patterns over repo paths; default every file
    parameters:
      model: tiny-q4.gguf           # path inside the snapshot ("" = the snapshot directory itself)

Only the frontend downloads (``corral.staging.hub_download``); workers receive the committed
snapshot through the normal stager. Layout under the frontend's models dir (the ``.artifacts``
component is what the reference keys managed snapshots on):

    .artifacts/huggingface/<org>--<name>/snapshots/<selection>/...   committed, complete trees
    .artifacts/huggingface/<org>--<name>/refs/<revision>[-<patterns>] name of the selection a ref resolved to

``<selection>`` is the commit sha, plus ``-<hash of the include patterns>`` when patterns are given,
so two configs that select different files of one commit never share a half-matching tree.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

ARTIFACTS_DIR = ".artifacts"
HUB_DIR = "huggingface"
DEFAULT_REVISION = "main"
_REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


class HuggingFaceConfigError(ValueError):
    """The ``huggingface:`` block is malformed; the message names the field."""


@dataclass(frozen=True)
class HuggingFaceSource:
    repo: str
    revision: str = DEFAULT_REVISION
    include: tuple[str, ...] = ()

    @property
    def patterns_id(self) -> str:
        """Short stable id of the include patterns ('' when every file is selected)."""
        if not self.include:
            return ""
        return hashlib.sha256(json.dumps(sorted(self.include)).encode()).hexdigest()[:8]

    def selection_name(self, commit: str) -> str:
        return f"{commit}-{self.patterns_id}" if self.patterns_id else commit


def parse_huggingface(value: Any) -> HuggingFaceSource | None:
    """Validate the ``huggingface:`` mapping of a model config (None when absent)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = {"repo": value}
    if not isinstance(value, dict):
        raise HuggingFaceConfigError("field 'huggingface' must be a mapping with repo, revision and include")
    repo = value.get("repo")
    if not isinstance(repo, str) or not _REPO_RE.match(repo.strip()) or ".." in repo:
        raise HuggingFaceConfigError(f"field 'huggingface.repo' must look like 'org/name', got {repo!r}")
    revision = value.get("revision", DEFAULT_REVISION)
    if not isinstance(revision, str) or not revision.strip() or ".." in revision or "\x00" in revision:
        raise HuggingFaceConfigError(
            f"field 'huggingface.revision' must be a branch, tag or commit, got {revision!r}"
        )
    include = value.get("include", [])
    if isinstance(include, str):
        include = [include]
    if not isinstance(include, list) or not all(isinstance(p, str) and p.strip() for p in include):
        raise HuggingFaceConfigError(
            f"field 'huggingface.include' must be a list of glob patterns, got {include!r}"
        )
    return HuggingFaceSource(repo.strip(), revision.strip(), tuple(p.strip() for p in include))


def hub_root(models_dir: Path) -> Path:
    """Where every managed snapshot of a models directory lives (one of the model file roots)."""
    return models_dir / ARTIFACTS_DIR / HUB_DIR


def repo_dir(models_dir: Path, source: HuggingFaceSource) -> Path:
    return hub_root(models_dir) / source.repo.replace("/", "--")


def ref_path(models_dir: Path, source: HuggingFaceSource) -> Path:
    name = quote(source.revision, safe="")
    if source.patterns_id:
        name = f"{name}-{source.patterns_id}"
    return repo_dir(models_dir, source) / "refs" / name


def snapshot_path(models_dir: Path, source: HuggingFaceSource, selection: str) -> Path:
    return repo_dir(models_dir, source) / "snapshots" / selection


def committed_snapshot(models_dir: Path, source: HuggingFaceSource) -> Path | None:
    """The complete snapshot the source's ref last resolved to, or None before the first download."""
    try:
        selection = ref_path(models_dir, source).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if not selection or "/" in selection or selection.startswith("."):
        return None
    path = snapshot_path(models_dir, source, selection)
    return path if path.is_dir() else None
