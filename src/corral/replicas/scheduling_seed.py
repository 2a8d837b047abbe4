"""Declarative scheduling rules at boot: LOCALAI_MODEL_SCHEDULING_CONFIG (YAML) and LOCALAI_MODEL_SCHEDULING
(inline JSON), both a list of entries with the API's fields (`replicas: all` for a static spread).

Authoritative: every listed model's whole rule — prefix-routing overrides included — is replaced
on every boot; models not listed are never touched. A mistake stops the frontend with one line
naming the source, the entry and the field.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import asyncpg
import yaml

from corral.config.errors import ConfigError
from corral.placement.rules import RuleInvalid, RuleSpec, parse_rule
from corral.store import scheduling as scheduling_store

log = logging.getLogger(__name__)

FILE_SETTING = "LOCALAI_MODEL_SCHEDULING_CONFIG"
INLINE_SETTING = "LOCALAI_MODEL_SCHEDULING"


def parse_entries(entries: Any, source: str) -> list[RuleSpec]:
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise ConfigError(
            f"{source}: expected a list of rules like "
            '[{"model_name": "m", "replicas": "all"}], got ' + type(entries).__name__
        )
    specs: list[RuleSpec] = []
    for number, entry in enumerate(entries, start=1):
        name = entry.get("model_name") if isinstance(entry, dict) else None
        label = f"{source} entry {number}" + (f" (model_name {name!r})" if isinstance(name, str) else "")
        try:
            specs.append(parse_rule(entry, declarative=True))
        except RuleInvalid as exc:
            raise ConfigError(f"{label}: {exc}") from None
    return specs


def _read_file(path: str) -> list[RuleSpec]:
    source = f"{FILE_SETTING} ({path})"
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read the file: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {str(exc).splitlines()[0]}") from None
    return parse_entries(data, source)


def _read_inline(text: str) -> list[RuleSpec]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(
            f"{INLINE_SETTING}: not valid JSON ({exc}); send a list like "
            '[{"model_name":"m","replicas":"all"}]'
        ) from None
    return parse_entries(data, INLINE_SETTING)


def declared_rules(settings: Any) -> list[RuleSpec]:
    """The validated rules of both settings (file first); a model listed twice is an error."""
    specs: list[RuleSpec] = []
    if settings.model_scheduling_config:
        specs += _read_file(settings.model_scheduling_config)
    if settings.model_scheduling.strip():
        specs += _read_inline(settings.model_scheduling)
    seen: set[str] = set()
    for spec in specs:
        if spec.model_name in seen:
            raise ConfigError(
                f"model_name {spec.model_name!r} is listed twice in {FILE_SETTING} / {INLINE_SETTING}; "
                "list each model once"
            )
        seen.add(spec.model_name)
    return specs


async def apply(pool: asyncpg.Pool, specs: list[RuleSpec]) -> None:
    if not specs:
        return
    await scheduling_store.seed(pool, specs)
    log.info(
        "applied %d declarative scheduling rule(s): %s", len(specs), ", ".join(s.model_name for s in specs)
    )
