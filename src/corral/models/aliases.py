"""Model aliases: a stable name (a "deployment slot") that points at a configured model.

An alias is a YAML file in the models directory with exactly two fields:

    name: production     # the name clients and scheduling rules may use
    alias: llama3        # the configured model it points at (never another alias)

A request for `production` is served by the replicas of `llama3` (one load serves both names),
and a scheduling rule keyed by `production` governs `llama3`. Repointing the alias with
`PUT /api/model-configs/production` (body `name: production` / `alias: <model>`) updates every
frontend at once and moves the rule to the new model; editing the file takes effect at restart.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from corral.models.names import name_problem

log = logging.getLogger(__name__)

ALIAS_FIELDS = frozenset({"name", "alias"})


class AliasConfigError(ValueError):
    """An alias file is malformed; the message names the file and the field."""


@dataclass(frozen=True)
class Resolution:
    """What a name governs: `model` (None when it resolves to nothing) and why not (`problem`)."""

    model: str | None
    via_alias: bool = False
    problem: str = ""


def is_alias_document(data: Any) -> bool:
    return isinstance(data, dict) and "alias" in data


def parse_alias(data: dict[str, Any], source: Path) -> tuple[str, str]:
    extra = sorted(str(k) for k in data if k not in ALIAS_FIELDS)
    if extra:
        raise AliasConfigError(
            f"{source}: an alias file takes only 'name' and 'alias'; remove {', '.join(extra)}"
        )
    name, target = data.get("name"), data.get("alias")
    if not isinstance(name, str) or not name.strip():
        raise AliasConfigError(f"{source}: field 'name' is required (the alias clients request)")
    if not isinstance(target, str) or not target.strip():
        raise AliasConfigError(f"{source}: field 'alias' must name the model this alias points at")
    for field, value in (("name", name.strip()), ("alias", target.strip())):
        problem = name_problem(value)
        if problem is not None:
            raise AliasConfigError(f"{source}: field {field!r} {problem}")
    if name.strip() == target.strip():
        raise AliasConfigError(f"{source}: alias {name.strip()!r} points at itself")
    return name.strip(), target.strip()


def load_aliases(models_dir: Path, models: Collection[str]) -> dict[str, str]:
    """Every alias file in the models dir; a bad file or a name taken by a model is logged and skipped."""
    aliases: dict[str, str] = {}
    if not models_dir.is_dir():
        return aliases
    for path in sorted([*models_dir.glob("*.yaml"), *models_dir.glob("*.yml")]):
        try:
            data = yaml.safe_load(path.read_text())
            if not is_alias_document(data):
                continue
            name, target = parse_alias(data, path)
        except (AliasConfigError, yaml.YAMLError, OSError) as exc:
            log.error("skipping alias file %s: %s", path, exc)
            continue
        if name in models or name in aliases:
            log.error("skipping alias file %s: the name %r is already a model or another alias", path, name)
            continue
        aliases[name] = target
    for name in sorted(aliases):
        problem = resolve(name, models, aliases).problem
        if problem:
            log.warning("%s", problem)
    return aliases


def resolve(name: str, models: Collection[str] | None, aliases: Mapping[str, str]) -> Resolution:
    """The model `name` stands for. `models` None: do not check that an alias target is configured."""
    target = aliases.get(name)
    if target is None:
        return Resolution(name)
    if target in aliases:
        return Resolution(
            None, True, f"alias {name!r} points at another alias {target!r}; point it at a model"
        )
    if models is not None and target not in models:
        return Resolution(None, True, f"alias {name!r} points at {target!r}, which is not a configured model")
    return Resolution(target, True)
