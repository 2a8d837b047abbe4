"""Model configuration: one YAML per model in the frontend's models directory.

name: gemma-3-270m          # the model id clients ask for (tracking key)
backend: llama-cpp          # the backend the worker starts: llama-cpp, simulator, or any backend
                            # installed on the worker or listed by its galleries (corral.gallery)
context_size: 2048
embeddings: false           # serves /v1/embeddings
reranking: false            # serves /v1/rerank
parameters:
  model: gemma-3-270m.gguf  # file relative to the models dir (or absolute, inside a root: models/roots.py)
options: ["chat_format:gemma"]
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from corral.models.aliases import is_alias_document
from corral.models.artifacts import (
    REPEATED_FIELD,
    SCALAR_FIELDS,
    ArtifactPaths,
    StagedPath,
    expand_files,
    option_path,
    parse_artifacts,
    resolve_local,
)
from corral.models.capabilities import usecase_problem
from corral.models.huggingface import (
    HuggingFaceConfigError,
    HuggingFaceSource,
    committed_snapshot,
    parse_huggingface,
)
from corral.models.mcp import MCPConfigError, MCPServers, parse_mcp
from corral.models.names import backend_name_problem, name_problem
from corral.models.revision import config_revision
from corral.models.roots import ModelRoots, PathOutsideRoots
from corral.models.text import invalid_text, text_problem

log = logging.getLogger(__name__)

KNOWN_BACKENDS = ("llama-cpp", "simulator")  # built in; others install from a gallery on first load
FILE_BACKENDS = ("llama-cpp",)  # backends that need parameters.model (a model file)


class ModelConfigError(Exception):
    """A model YAML is malformed; the message names the file, the field and the fix."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field  # the offending field when one is known ('parameters.model', 'options[2]', …)


@dataclass(frozen=True)
class NamedPath:
    """One value of a config that may name a file, and the directories a relative value is read against."""

    field: str  # as the YAML spells it: 'parameters.model', 'mmproj', 'lora_adapters[0]', 'options[2]'
    value: str
    bases: tuple[Path, ...]
    always_path: bool = True  # False for an option's value: checked only when it names a file


@dataclass(frozen=True)
class ModelConfig:
    name: str
    backend: str
    model: str
    models_dir: Path
    context_size: int = 0
    embeddings: bool = False
    reranking: bool = False  # serves /v1/rerank (the backend implements the Rerank RPC)
    threads: int = 0
    seed: int = 0
    gpu_layers: int = 0
    options: tuple[str, ...] = ()
    node_selector: dict[str, str] = field(default_factory=dict, compare=False)  # placement constraint
    disabled: bool = False  # configured but not served; its replicas are stopped
    revision: str = ""  # hash of the semantic configuration (models/revision.py)
    raw: dict[str, Any] = field(default_factory=dict, compare=False)  # the parsed YAML mapping, for edits
    source: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    artifacts: ArtifactPaths = field(default_factory=ArtifactPaths)  # mmproj, lora, ... (issue 4)
    huggingface: HuggingFaceSource | None = None  # managed HF artifact, downloaded by the frontend
    mcp: MCPServers = field(default_factory=MCPServers, compare=False)  # `mcp:` servers run by agent workers
    extra_roots: tuple[Path, ...] = field(default=(), compare=False)  # CORRAL_MODEL_PATH_ROOTS

    @property
    def roots(self) -> ModelRoots:
        """Where this model's files may live (models/roots.py)."""
        return ModelRoots(self.models_dir, self.extra_roots)

    @property
    def snapshot_dir(self) -> Path | None:
        """Committed Hugging Face snapshot of a managed model (None before its first download)."""
        if self.huggingface is None:
            return None
        return committed_snapshot(self.models_dir, self.huggingface)

    @property
    def path_roots(self) -> list[Path]:
        """Where relative paths resolve: the snapshot of a managed model first, then the models dir."""
        snapshot = self.snapshot_dir
        return [snapshot, self.models_dir] if snapshot is not None else [self.models_dir]

    @property
    def model_file(self) -> Path | None:
        """The local file the model loads from, or None when `model` is not a local path."""
        if self.huggingface is not None and not self.model:
            return self.snapshot_dir
        if not self.model:
            return None
        return resolve_local(self.model, self.path_roots)

    def staged_paths(self) -> list[StagedPath]:
        """Every existing local path the model needs, with the ModelOptions field it fills."""
        roots = self.path_roots
        paths = [StagedPath("ModelFile", self.model_file)] if self.model_file is not None else []
        if self.snapshot_dir is not None:
            paths.append(StagedPath("", self.snapshot_dir))  # managed snapshots travel whole
        for proto_field, value in self.artifacts.scalars:
            local = resolve_local(value, roots)
            if local is not None:
                paths.append(StagedPath(proto_field, local))
        for value in self.artifacts.lora_adapters:
            local = resolve_local(value, roots)
            if local is not None:
                paths.append(StagedPath(REPEATED_FIELD, local))
        main_dir = self.model_file.parent if self.model_file is not None else None
        option_roots = [self.models_dir, *([main_dir] if main_dir else []), *roots]
        for option in self.options:
            local = option_path(option, option_roots, self.models_dir)
            if local is not None:
                paths.append(StagedPath("", local))
        return paths

    def named_paths(self) -> list[NamedPath]:
        """Every configured value that may name a local file, with the bases it resolves against."""
        roots = tuple(self.path_roots)
        named = [NamedPath("parameters.model", self.model, roots)] if self.model else []
        yaml_keys = {proto: key for key, proto in SCALAR_FIELDS.items()}
        named += [NamedPath(yaml_keys[proto], value, roots) for proto, value in self.artifacts.scalars]
        named += [
            NamedPath(f"lora_adapters[{index}]", value, roots)
            for index, value in enumerate(self.artifacts.lora_adapters)
        ]
        main_dir = self.model_file.parent if self.model_file is not None else None
        option_roots = (self.models_dir, *([main_dir] if main_dir else []), *roots)
        for index, option in enumerate(self.options):
            _, sep, value = option.partition(":")
            if sep and value.strip():
                named.append(NamedPath(f"options[{index}]", value.strip(), option_roots, always_path=False))
        return named

    def files(self) -> list[Path]:
        """Local files to stage to a worker before LoadModel: main file, companions, dirs, option files."""
        return expand_files(p.path for p in self.staged_paths())

    def checkpoint_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.files())


INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def _field(data: dict[str, Any], key: str, kind: type, source: Path, default: Any) -> Any:
    value = data.get(key, default)
    if value is None:
        return default
    if kind is int and isinstance(value, bool):
        raise ModelConfigError(f"{source}: field {key!r} must be an integer, got {value!r}")
    if not isinstance(value, kind):
        raise ModelConfigError(f"{source}: field {key!r} must be {kind.__name__}, got {value!r}")
    if (
        isinstance(value, int) and kind is int and not INT32_MIN <= value <= INT32_MAX
    ):  # every int option is a protobuf int32 field
        raise ModelConfigError(
            f"{source}: field {key!r} must be between {INT32_MIN} and {INT32_MAX}, got {value}"
        )
    return value


def check_paths(cfg: ModelConfig) -> None:
    """ModelConfigError naming the field, value, where it resolves and the setting, for a file outside the roots."""
    roots = cfg.roots
    for named in cfg.named_paths():
        try:
            roots.check(named.field, named.value, named.bases, always_path=named.always_path)
        except PathOutsideRoots as exc:
            raise ModelConfigError(f"{cfg.source}: {exc}", exc.field) from None


def parse_model_config(
    data: Any, source: Path, models_dir: Path, extra_roots: tuple[Path, ...] = ()
) -> ModelConfig:
    """The model config of a YAML mapping; ModelConfigError names the file, the field and the fix.

    Every file it names must resolve under `models_dir` or one of `extra_roots` (models/roots.py)."""
    if not isinstance(data, dict):
        raise ModelConfigError(f"{source}: expected a mapping with name, backend and parameters.model")
    if (
        bad_text := invalid_text(data)
    ) is not None:  # neither a file nor PostgreSQL (nor the revision hash) takes it
        raise ModelConfigError(f"{source}: {text_problem(bad_text)}", bad_text)
    name = _field(data, "name", str, source, "").strip()
    if not name:
        raise ModelConfigError(f"{source}: field 'name' is required (the model id clients request)")
    problem = name_problem(name)
    if problem is not None:
        raise ModelConfigError(f"{source}: field 'name' {problem}")
    backend = _field(data, "backend", str, source, "").strip()
    if (problem := backend_name_problem(backend)) is not None:
        raise ModelConfigError(
            f"{source}: field 'backend' {problem}; use a built-in backend ({', '.join(KNOWN_BACKENDS)}) "
            "or one a gallery lists"
        )
    params = _field(data, "parameters", dict, source, {})
    model = str(params.get("model") or "").strip()
    try:
        huggingface = parse_huggingface(data.get("huggingface"))
        artifacts = parse_artifacts(data, source)
        mcp = parse_mcp(data.get("mcp"), data.get("agent"))
    except MCPConfigError as exc:
        raise ModelConfigError(f"{source}: {exc}") from None
    except (HuggingFaceConfigError, ValueError) as exc:
        raise ModelConfigError(f"{source}: {exc}" if str(source) not in str(exc) else str(exc)) from None
    if not model and backend in FILE_BACKENDS and huggingface is None:
        raise ModelConfigError(f"{source}: field 'parameters.model' is required (the model file)")
    options = _field(data, "options", list, source, [])
    if (problem := usecase_problem(data.get("known_usecases"))) is not None:
        raise ModelConfigError(f"{source}: field 'known_usecases' {problem}", "known_usecases")
    cfg = ModelConfig(
        name=name,
        backend=backend,
        model=model,
        models_dir=models_dir,
        context_size=_field(data, "context_size", int, source, 0),
        embeddings=_field(data, "embeddings", bool, source, False),
        reranking=_field(data, "reranking", bool, source, False),
        threads=_field(data, "threads", int, source, 0),
        seed=_field(params, "seed", int, source, 0),
        gpu_layers=_field(data, "gpu_layers", int, source, 0),
        options=tuple(str(o) for o in options),
        source=source,
        node_selector={
            str(k): "" if v is None else str(v)
            for k, v in _field(data, "node_selector", dict, source, {}).items()
        },
        artifacts=artifacts,
        huggingface=huggingface,
        mcp=mcp,
        disabled=_field(data, "disabled", bool, source, False),
        revision=config_revision(data),
        raw=dict(data),
        extra_roots=tuple(extra_roots),
    )
    check_paths(cfg)
    return cfg


def load_model_configs(models_dir: Path, extra_roots: tuple[Path, ...] = ()) -> dict[str, ModelConfig]:
    """Read every *.yaml/*.yml in the models dir; a bad file (a file outside the roots too) is logged and skipped,
    not fatal."""
    configs: dict[str, ModelConfig] = {}
    if not models_dir.is_dir():
        log.warning("models directory %s does not exist; no models are configured", models_dir)
        return configs
    for path in sorted([*models_dir.glob("*.yaml"), *models_dir.glob("*.yml")]):
        try:
            data = yaml.safe_load(path.read_text())
            if is_alias_document(data):  # `name` + `alias`: read by models/aliases.py, not a model
                continue
            config = parse_model_config(data, path, models_dir, extra_roots)
        except (ModelConfigError, yaml.YAMLError, OSError, UnicodeDecodeError) as exc:
            log.error("skipping model config %s: %s", path, exc)
            continue
        if config.name in configs:
            log.error(
                "skipping %s: model %r is already defined in %s",
                path,
                config.name,
                configs[config.name].source,
            )
            continue
        configs[config.name] = config
    return configs
