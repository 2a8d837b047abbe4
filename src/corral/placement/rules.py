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
from corral.placement.schedules import ScheduleInvalid, ScheduleWindow, parse_schedules

ROUTE_POLICIES = ("", "round_robin", "least_loaded", "prefix_cache", "power_of_two")  # "" = process default
MODEL_NAME_MAX = 255
LABEL_KEY_MAX = 128
LABEL_VALUE_MAX = 255
REPLICAS_MAX = 10_000
TARGET_MAX_S = 3600.0  # a latency target beyond an hour is a mistake
IDLE_MAX_S = 7 * 24 * 3600.0
AUTOSCALE_FIELDS = ("target_queue_wait_s", "target_ttft_s", "scale_down_idle_s", "cooldown_s", "schedules")
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
    *AUTOSCALE_FIELDS,
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
    autoscale: Autoscale = field(default_factory=lambda: Autoscale())


@dataclass(frozen=True)
class Autoscale:
    """Autoscaling on load (issue 25); every field optional: None = off (cooldown: CORRAL_AUTOSCALE_COOLDOWN)."""

    target_queue_wait_s: float | None = None  # scale up when the cluster's queue wait p95 passes it
    target_ttft_s: float | None = None  # … or its time-to-first-token p95
    scale_down_idle_s: float | None = (
        None  # idle window of this rule (else CORRAL_SCALE_DOWN_IDLE); min 0 ⇒ to zero
    )
    cooldown_s: float | None = None  # between two scaling actions
    schedules: tuple[ScheduleWindow, ...] = ()

    @property
    def on_load(self) -> bool:
        return self.target_queue_wait_s is not None or self.target_ttft_s is not None

    @property
    def configured(self) -> bool:
        return self != Autoscale()

    def to_json(self) -> dict[str, Any]:
        """The fields that are set, as the API answers them."""
        out: dict[str, Any] = {
            k: getattr(self, k)
            for k in ("target_queue_wait_s", "target_ttft_s", "scale_down_idle_s", "cooldown_s")
            if getattr(self, k) is not None
        }
        if self.schedules:
            out["schedules"] = [w.to_json() for w in self.schedules]
        return out


@dataclass(frozen=True)
class AutoscaleRecord:
    """What the reconciler last made of a rule's load (stored on the rule): the explain of its last pass."""

    reason: str = ""
    checked_s: float | None = None
    over_passes: int = 0  # consecutive passes over a target (hysteresis)
    last_action: str = ""
    last_action_s: float | None = None


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
    autoscale: Autoscale = field(default_factory=lambda: Autoscale())
    record: AutoscaleRecord = field(default_factory=lambda: AutoscaleRecord())

    @property
    def autoscaling(self) -> bool:
        """Only these rules are the reconciler's business (reference: min > 0 or max > 0 or spread; issue 25:
        or a load target, an idle window or a schedule)."""
        return self.min_replicas > 0 or self.max_replicas > 0 or self.spread_all or self.autoscale.configured

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


def _seconds(
    body: Mapping[str, Any], key: str, *, low: float, high: float, zero: bool = False
) -> float | None:
    value = _number(body, key)
    if value is None:
        return None
    if not (low <= value <= high) or (not zero and value <= 0):
        above = f"at least {low:g}" if zero else "more than 0"
        raise RuleInvalid(key, f"must be {above} and at most {high:g} seconds, got {value:g}")
    return value


def _autoscale(body: Mapping[str, Any], low: int, high: int, spread: bool) -> Autoscale:
    try:
        schedules = parse_schedules(body.get("schedules"))
    except ScheduleInvalid as exc:
        raise RuleInvalid(exc.field, exc.message) from None
    scaling = Autoscale(
        target_queue_wait_s=_seconds(body, "target_queue_wait_s", low=0.0, high=TARGET_MAX_S),
        target_ttft_s=_seconds(body, "target_ttft_s", low=0.0, high=TARGET_MAX_S),
        scale_down_idle_s=_seconds(body, "scale_down_idle_s", low=0.0, high=IDLE_MAX_S),
        cooldown_s=_seconds(body, "cooldown_s", low=0.0, high=IDLE_MAX_S, zero=True),
        schedules=schedules,
    )
    if spread and scaling.configured:
        key = next(k for k in AUTOSCALE_FIELDS if body.get(k) is not None)
        raise RuleInvalid(
            key,
            "replicas: all keeps one replica on every matching node and does not autoscale; use "
            "min_replicas/max_replicas with autoscaling",
        )
    for i, window in enumerate(schedules):
        if high and window.min_replicas > high:
            raise RuleInvalid(
                f"schedules[{i}].min_replicas",
                f"must not exceed max_replicas ({window.min_replicas} > {high})",
            )
    if scaling.on_load and high == 0:
        key = "target_queue_wait_s" if scaling.target_queue_wait_s is not None else "target_ttft_s"
        raise RuleInvalid(
            key, "scaling on load needs a ceiling: set max_replicas >= 1 (the most replicas load may add)"
        )
    return scaling


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
    scaling = _autoscale(body, low, high, spread)
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
        autoscale=scaling,
        **routing,
    )
