"""Model configuration: one YAML per model in the frontend's models directory.

    name: gemma-3-270m          # the model id clients ask for (tracking key)
    backend: llama-cpp          # engine the worker starts: llama-cpp | simulator
    context_size: 2048
    embeddings: false
    parameters:
      model: gemma-3-270m.gguf  # file relative to the models dir (or absolute)
    options: ["chat_format:gemma"]
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

log = logging.getLogger(__name__)

KNOWN_BACKENDS = ("llama-cpp", "simulator")


class ModelConfigError(Exception):
    """A model YAML is malformed; the message names the file, the field and the fix."""


@dataclass(frozen=True)
class ModelConfig:
    name: str
    backend: str
    model: str
    models_dir: Path
    context_size: int = 0
    embeddings: bool = False
    threads: int = 0
    seed: int = 0
    gpu_layers: int = 0
    options: tuple[str, ...] = ()
    source: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def model_file(self) -> Path | None:
        """The local file the model loads from, or None when `model` is not a local path."""
        if not self.model:
            return None
        path = Path(self.model)
        path = path if path.is_absolute() else self.models_dir / path
        return path if path.exists() else None

    def files(self) -> list[Path]:
        """Local files to stage to a worker before LoadModel (main file; companions come later)."""
        main = self.model_file
        if main is None:
            return []
        if main.is_dir():
            return sorted(p for p in main.rglob("*") if p.is_file() and not p.name.endswith(".sha256"))
        return [main]

    def checkpoint_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.files())


def _field(data: dict[str, Any], key: str, kind: type, source: Path, default: Any) -> Any:
    value = data.get(key, default)
    if value is None:
        return default
    if kind is int and isinstance(value, bool):
        raise ModelConfigError(f"{source}: field {key!r} must be an integer, got {value!r}")
    if not isinstance(value, kind):
        raise ModelConfigError(f"{source}: field {key!r} must be {kind.__name__}, got {value!r}")
    return value


def parse_model_config(data: Any, source: Path, models_dir: Path) -> ModelConfig:
    if not isinstance(data, dict):
        raise ModelConfigError(f"{source}: expected a mapping with name, backend and parameters.model")
    name = _field(data, "name", str, source, "").strip()
    if not name:
        raise ModelConfigError(f"{source}: field 'name' is required (the model id clients request)")
    backend = _field(data, "backend", str, source, "").strip()
    if backend not in KNOWN_BACKENDS:
        raise ModelConfigError(
            f"{source}: field 'backend' is {backend!r}; use one of {', '.join(KNOWN_BACKENDS)}"
        )
    params = _field(data, "parameters", dict, source, {})
    model = str(params.get("model") or "").strip()
    if not model and backend != "simulator":
        raise ModelConfigError(f"{source}: field 'parameters.model' is required (the model file)")
    options = _field(data, "options", list, source, [])
    return ModelConfig(
        name=name, backend=backend, model=model, models_dir=models_dir,
        context_size=_field(data, "context_size", int, source, 0),
        embeddings=_field(data, "embeddings", bool, source, False),
        threads=_field(data, "threads", int, source, 0),
        seed=_field(params, "seed", int, source, 0),
        gpu_layers=_field(data, "gpu_layers", int, source, 0),
        options=tuple(str(o) for o in options), source=source,
    )


def load_model_configs(models_dir: Path) -> dict[str, ModelConfig]:
    """Read every *.yaml/*.yml in the models dir; a bad file is logged and skipped, not fatal."""
    configs: dict[str, ModelConfig] = {}
    if not models_dir.is_dir():
        log.warning("models directory %s does not exist; no models are configured", models_dir)
        return configs
    for path in sorted([*models_dir.glob("*.yaml"), *models_dir.glob("*.yml")]):
        try:
            config = parse_model_config(yaml.safe_load(path.read_text()), path, models_dir)
        except (ModelConfigError, yaml.YAMLError, OSError) as exc:
            log.error("skipping model config %s: %s", path, exc)
            continue
        if config.name in configs:
            log.error("skipping %s: model %r is already defined in %s", path, config.name,
                      configs[config.name].source)
            continue
        configs[config.name] = config
    return configs
