"""Scheduling rules: where a model may run and how many replicas it keeps (reference §2.7, §4.3).

A rule is keyed by a model name or an alias. Replica modes, mutually exclusive:
  * elastic — `min_replicas` (kept loaded) and `max_replicas` (burst ceiling, 0 = no upper bound);
  * static spread — `replicas: "all"` (stored as `spread_all`): one replica on every matching node.
The prefix-routing overrides are stored for the prefix-routing work; None means "keep the stored
value" in an API update and "default" in a declarative entry (which replaces the whole rule).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from corral.models.names import name_problem

ROUTE_POLICIES = ("", "round_robin", "least_loaded", "prefix_cache", "power_of_two")  # "" = process default
MODEL_NAME_MAX = 255
LABEL_KEY_MAX = 128
LABEL_VALUE_MAX = 255
REPLICAS_MAX = 10_000
FIELDS = (
    "model_name",
    "node_selector",
    "min_replicas",
    "max_replicas",
    "replicas",
    "spread_all",
    "route_policy",
    "balance_abs_threshold",
    "balance_rel_threshold",
    "min_prefix_match",
)


class RuleInvalid(ValueError):
    """A scheduling rule field is wrong; `field` names it and the message says what to send instead."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"field '{field}': {message}")
        self.field = field


@dataclass(frozen=True)
class RuleSpec:
    """A validated rule as sent by an operator (API body or declarative entry)."""

    model_name: str
    node_selector: dict[str, str] = field(default_factory=dict)
    min_replicas: int = 0
    max_replicas: int = 0
    spread_all: bool = False
    route_policy: str | None = None
    balance_abs_threshold: int | None = None
    balance_rel_threshold: float | None = None
    min_prefix_match: float | None = None


@dataclass(frozen=True)
class SchedulingRule:
    """A rule as stored, with the reconciler's back-off state."""

    id: str
    model_name: str
    node_selector: dict[str, str] = field(default_factory=dict)
    min_replicas: int = 0
    max_replicas: int = 0
    spread_all: bool = False
    route_policy: str = ""
    balance_abs_threshold: int = 0
    balance_rel_threshold: float = 0.0
    min_prefix_match: float = 0.0
    unsatisfiable_until_s: float | None = None
    unsatisfiable_ticks: int = 0
    unsatisfiable_reason: str = ""
    unsatisfiable_fingerprint: str = ""
    declared: bool = False
    created_s: float = 0.0
    updated_s: float = 0.0

    @property
    def autoscaling(self) -> bool:
        """Only these rules are the reconciler's business (reference: min > 0 or max > 0 or spread)."""
        return self.min_replicas > 0 or self.max_replicas > 0 or self.spread_all

    def cooling_down(self, now_s: float, fingerprint: str) -> bool:
        """In its back-off window, unless the registry changed since the window began."""
        return (
            self.unsatisfiable_until_s is not None
            and self.unsatisfiable_until_s > now_s
            and self.unsatisfiable_fingerprint == fingerprint
        )


def _int(body: Mapping[str, Any], key: str, *, low: int = 0, high: int = REPLICAS_MAX) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RuleInvalid(key, f"must be a whole number, got {value!r}")
    if not low <= value <= high:
        raise RuleInvalid(key, f"must be between {low} and {high}, got {value}")
    return value


def _number(body: Mapping[str, Any], key: str) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RuleInvalid(key, f"must be a number, got {value!r}")
    return float(value)


def _model_name(body: Mapping[str, Any]) -> str:
    name = body.get("model_name")
    if not isinstance(name, str) or not name.strip():
        raise RuleInvalid("model_name", "is required: the model (or alias) the rule is for")
    name = name.strip()
    if len(name) > MODEL_NAME_MAX:
        raise RuleInvalid("model_name", f"must be at most {MODEL_NAME_MAX} characters")
    problem = name_problem(name)
    if problem is not None:
        raise RuleInvalid("model_name", problem)
    return name


def parse_selector(raw: Any, key: str = "node_selector") -> dict[str, str]:
    """A label map; `!key: value` must not match and `!key` (empty value) means the label is absent."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise RuleInvalid(
            key, f'must be an object of label → value, e.g. {{"gpu.vendor": "nvidia"}}, got {raw!r}'
        )
    selector = {}
    for label, value in raw.items():
        if not isinstance(label, str) or not label.lstrip("!") or len(label) > LABEL_KEY_MAX + 1:
            raise RuleInvalid(key, f"label key {label!r} must be 1-{LABEL_KEY_MAX} characters")
        if value is None:
            value = ""
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise RuleInvalid(f"{key}.{label}", f"must be a string label value, got {value!r}")
        if len(str(value)) > LABEL_VALUE_MAX:
            raise RuleInvalid(f"{key}.{label}", f"must be at most {LABEL_VALUE_MAX} characters")
        selector[label] = str(value)
    return selector


def _spread(body: Mapping[str, Any]) -> bool:
    spread = body.get("spread_all")
    if spread is not None and not isinstance(spread, bool):
        raise RuleInvalid("spread_all", f"must be true or false, got {spread!r}")
    replicas = body.get("replicas")
    if replicas is None or replicas is False or replicas in ("", "auto"):
        return bool(spread)
    if replicas is True or (isinstance(replicas, str) and replicas.strip().lower() == "all"):
        return True
    raise RuleInvalid(
        "replicas",
        f'must be "all" (one replica on every matching node) or omitted, got {replicas!r}; '
        "use min_replicas/max_replicas for elastic scaling",
    )


def _routing(body: Mapping[str, Any]) -> dict[str, Any]:
    policy = body.get("route_policy")
    if policy is not None and policy not in ROUTE_POLICIES:
        raise RuleInvalid(
            "route_policy",
            f'must be one of "", round_robin, least_loaded, prefix_cache, power_of_two; got {policy!r}',
        )
    rel = _number(body, "balance_rel_threshold")
    if rel is not None and rel != 0 and rel < 1:
        raise RuleInvalid("balance_rel_threshold", f"must be 0 (inherit) or at least 1, got {rel:g}")
    match = _number(body, "min_prefix_match")
    if match is not None and not 0 <= match <= 1:
        raise RuleInvalid("min_prefix_match", f"must be between 0 and 1, got {match:g}")
    return {
        "route_policy": policy,
        "balance_abs_threshold": _int(body, "balance_abs_threshold", high=1 << 31),
        "balance_rel_threshold": rel,
        "min_prefix_match": match,
    }


def parse_rule(body: Any, *, declarative: bool = False) -> RuleSpec:
    """Validate an API body or a declarative entry; RuleInvalid names the first wrong field."""
    if not isinstance(body, dict):
        raise RuleInvalid("body", 'must be an object like {"model_name": "llama3", "min_replicas": 1}')
    unknown = sorted(k for k in body if k not in FIELDS)
    if unknown:
        raise RuleInvalid(str(unknown[0]), f"unknown field; known fields: {', '.join(FIELDS)}")
    name = _model_name(body)
    selector = parse_selector(body.get("node_selector"))
    low, high = _int(body, "min_replicas") or 0, _int(body, "max_replicas") or 0
    spread = _spread(body)
    if spread and (low or high):
        key = "min_replicas" if low else "max_replicas"
        raise RuleInvalid(
            key,
            "replicas: all (one replica on every matching node) and min_replicas/max_replicas "
            "are mutually exclusive; choose one mode",
        )
    if high and low > high:
        raise RuleInvalid(
            "min_replicas",
            f"must not exceed max_replicas ({low} > {high}); max_replicas 0 means no upper bound",
        )
    if declarative and "max_replicas" in body and not (low or high or spread):
        raise RuleInvalid(
            "max_replicas",
            "an entry with only max_replicas: 0 does nothing; set min_replicas >= 1 "
            "(0 = no upper bound then), max_replicas >= 1, or replicas: all",
        )
    routing = _routing(body)
    if declarative:  # authoritative: the whole row is replaced, unset overrides go back to their defaults
        routing = {
            "route_policy": routing["route_policy"] or "",
            "balance_abs_threshold": routing["balance_abs_threshold"] or 0,
            "balance_rel_threshold": routing["balance_rel_threshold"] or 0.0,
            "min_prefix_match": routing["min_prefix_match"] or 0.0,
        }
    return RuleSpec(
        model_name=name,
        node_selector=selector,
        min_replicas=low,
        max_replicas=high,
        spread_all=spread,
        **routing,
    )
