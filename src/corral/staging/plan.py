"""What to stage for one model and how to rewrite its LoadModel options for the worker.

Keys follow reference §5.11: ``models/<trackingKey>/<path relative to the frontend models dir>``.
A configured path in another root (``CORRAL_MODEL_PATH_ROOTS``) keeps its own tree below its basename
(``models/<trackingKey>/<dir name>/<file>``) instead of the reference's flattening to the basename,
so two files with one name in different directories cannot collide. A file outside every root is
refused (:mod:`corral.models.roots`), never staged: the config checks passed when it was accepted, and
this is the check that holds when the disk changed since (a symlink swapped) or a config came another way.

After staging, every path field points at the worker's copy; ``ModelPath`` becomes the worker's
``<models>/<trackingKey>`` so relative options resolve there; option values that name a staged path
are rewritten when they would not resolve by themselves (absolute, or relative to the model's own dir).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from corral.models.artifacts import REPEATED_FIELD, StagedPath, expand_files, option_path, resolve_local
from corral.models.config import ModelConfig
from corral.models.roots import ModelRoots
from corral.proto import backend_pb2
from corral.staging.keys import MODELS_KEY_PREFIX, key_relative


@dataclass(frozen=True)
class PlannedFile:
    local_path: Path
    key: str
    relative: str  # the key below models/<trackingKey>/
    size_bytes: int
    record_hash: bool = True  # its hash may be recorded beside it: only under the models directory


@dataclass(frozen=True)
class StagingPlan:
    tracking_key: str
    models_dir: Path
    roots: tuple[StagedPath, ...]
    files: tuple[PlannedFile, ...]

    @property
    def total_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    model_roots: ModelRoots

    def relative(self, path: Path) -> str:
        """Key-relative name of a configured path (file or directory)."""
        return key_relative(path, self.model_roots)


def build_plan(cfg: ModelConfig) -> StagingPlan:
    """Every file to stage; PathOutsideRoots (a ValueError) for one outside the model's roots."""
    roots = tuple(cfg.staged_paths())
    model_roots = cfg.roots
    planned: dict[Path, PlannedFile] = {}
    for root in roots:
        for file in expand_files([root.path]):
            if file in planned:
                continue
            relative = key_relative(file, model_roots, root.path)
            planned[file] = PlannedFile(
                file,
                f"{MODELS_KEY_PREFIX}{cfg.name}/{relative}",
                relative,
                os.stat(file).st_size,
                model_roots.owns(file),
            )
    return StagingPlan(cfg.name, cfg.models_dir, roots, tuple(planned.values()), model_roots)


def remote_base(plan: StagingPlan, staged: dict[str, str]) -> str:
    """The worker's ``<models>/<trackingKey>`` directory, derived from the staged files' worker paths."""
    for planned in plan.files:
        remote = staged.get(planned.key)
        if remote and PurePosixPath(remote).as_posix().endswith("/" + planned.relative):
            return remote[: -len(planned.relative) - 1]
    raise ValueError(f"cannot derive the worker directory of model {plan.tracking_key} from {staged!r}")


def rewrite_for_worker(
    opts: backend_pb2.ModelOptions, cfg: ModelConfig, plan: StagingPlan, base: str
) -> backend_pb2.ModelOptions:
    """A copy of ``opts`` whose paths point at the worker's copies under ``base``."""

    def remote(path: Path) -> str:
        return f"{base}/{plan.relative(path)}"

    staged = _fill_fields(opts, cfg, remote)
    staged.ModelPath = base
    main_dir = cfg.model_file.parent if cfg.model_file is not None else None
    for name in ("Options", "Overrides"):
        values = list(getattr(staged, name))
        rewritten = [_rewrite_option(v, cfg, main_dir, remote) for v in values]
        if rewritten != values:
            del getattr(staged, name)[:]
            getattr(staged, name).extend(rewritten)
    return staged


def local_paths_for_shared(opts: backend_pb2.ModelOptions, cfg: ModelConfig) -> backend_pb2.ModelOptions:
    """Shared-models mode: the same fields, filled with the frontend's absolute paths (no staging)."""
    return _fill_fields(opts, cfg, lambda path: os.path.abspath(path))


def _fill_fields(opts: backend_pb2.ModelOptions, cfg: ModelConfig, to_path) -> backend_pb2.ModelOptions:  # type: ignore[no-untyped-def]
    result = backend_pb2.ModelOptions()
    result.CopyFrom(opts)
    roots = cfg.path_roots
    if cfg.model_file is not None:
        result.ModelFile = to_path(cfg.model_file)
    for proto_field, value in cfg.artifacts.scalars:
        local = resolve_local(value, roots)
        setattr(result, proto_field, to_path(local) if local is not None else value)
    if cfg.artifacts.lora_adapters:
        del result.LoraAdapters[:]
        for value in cfg.artifacts.lora_adapters:
            local = resolve_local(value, roots)
            getattr(result, REPEATED_FIELD).append(to_path(local) if local is not None else value)
    return result


def _rewrite_option(option: str, cfg: ModelConfig, main_dir: Path | None, remote) -> str:  # type: ignore[no-untyped-def]
    key, sep, value = option.partition(":")
    if not sep:
        return option
    option_roots = [cfg.models_dir, *([main_dir] if main_dir else []), *cfg.path_roots]
    local = option_path(option, option_roots, cfg.models_dir)
    if local is None:
        return option
    if not Path(value.strip()).is_absolute() and (cfg.models_dir / value.strip()).exists():
        return option  # resolves against ModelPath on the worker as it does here
    return f"{key}:{remote(local)}"
