"""Admin: scheduling rules — `GET/POST /api/nodes/scheduling`, `GET/DELETE /api/nodes/scheduling/<model>`.

Shapes follow the reference (§4.3; `node_selector` answered as a JSON string), plus what an
operator needs to read a rule: `target` (the model it governs, through an alias if keyed by
one), `shadowed` / `shadowed_by`, `declared` (seeded by LOCALAI_MODEL_SCHEDULING[_CONFIG]: an
API change lasts until the next boot) and `status` (what the reconciler makes of it).
Admin auth is enforced for the whole prefix by `access.AccessControl`.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse, Response

from corral.frontend.bounds import NAME_MAX
from corral.frontend.json_body import documented_body, json_body
from corral.frontend.state import FrontendState
from corral.models.aliases import Resolution, resolve
from corral.placement.autoscale import effective_min
from corral.placement.governance import Governance, conflicting_rule, govern
from corral.placement.rules import (
    IDLE_MAX_S,
    LABEL_VALUE_MAX,
    REPLICAS_MAX,
    ROUTE_POLICIES,
    TARGET_MAX_S,
    RuleInvalid,
    SchedulingRule,
    parse_rule,
)
from corral.placement.schedules import DAYS, SCHEDULES_MAX
from corral.store import scheduling as scheduling_store
from corral.store.scheduling import UNSATISFIABLE_TICKS, RuleConflict, selector_text

_REPLICAS = {"type": "integer", "minimum": 0, "maximum": REPLICAS_MAX}
_TARGET = {"type": "number", "exclusiveMinimum": 0, "maximum": TARGET_MAX_S}
_CLOCK = {"type": "string", "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$"}
_SCHEDULES = {
    "type": "array",
    "maxItems": SCHEDULES_MAX,
    "items": {
        "type": "object",
        "required": ["from", "to", "min_replicas"],
        "properties": {
            "days": {"type": "array", "minItems": 1, "items": {"type": "string", "enum": list(DAYS)}},
            "from": _CLOCK,
            "to": _CLOCK,
            "tz": {"type": "string", "minLength": 1, "maxLength": 64},
            "min_replicas": _REPLICAS,
        },
    },
}
RULE_BODY = documented_body(
    {
        "type": "object",
        "required": ["model_name"],
        "properties": {
            "model_name": {"type": "string", "minLength": 1, "maxLength": NAME_MAX},
            "node_selector": {
                "type": "object",
                "additionalProperties": {"type": "string", "maxLength": LABEL_VALUE_MAX},
            },
            "min_replicas": _REPLICAS,
            "max_replicas": _REPLICAS,
            "replicas": {"type": "string", "enum": ["all"]},
            "spread_all": {"type": "boolean"},
            "route_policy": {"type": "string", "enum": list(ROUTE_POLICIES)},
            "balance_abs_threshold": {"type": "integer", "minimum": 0, "maximum": 1 << 31},
            "balance_rel_threshold": {"type": "number", "minimum": 0},
            "min_prefix_match": {"type": "number", "minimum": 0, "maximum": 1},
            "target_queue_wait_s": _TARGET,
            "target_ttft_s": _TARGET,
            "scale_down_idle_s": {"type": "number", "exclusiveMinimum": 0, "maximum": IDLE_MAX_S},
            "cooldown_s": {"type": "number", "minimum": 0, "maximum": IDLE_MAX_S},
            "schedules": _SCHEDULES,
        },
    }
)
RuleName = Annotated[str, Path(max_length=NAME_MAX)]  # model_scheduling_configs.model_name varchar(255)


def _error(status: int, message: str, param: str | None = None) -> JSONResponse:
    error: dict[str, Any] = {"code": status, "message": message, "type": "node_error"}
    if param is not None:
        error["param"] = param
    return JSONResponse({"error": error}, status_code=status)


def _iso(seconds: float | None) -> str | None:
    return None if seconds is None else dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat()


def rule_status(rule: SchedulingRule, g: Governance, loaded: int, now_s: float) -> dict[str, Any]:
    """What the rule does now, in one word and one sentence."""
    if g.target is None:
        return {"state": "inert", "message": f"{g.problem}; this rule governs nothing"}
    if g.shadowed_by:
        return {"state": "shadowed", "message": f"shadowed: rule {g.shadowed_by!r} governs {g.target}"}
    if not rule.autoscaling:
        return {
            "state": "on_demand",
            "replicas": loaded,
            "message": f"{g.target} loads on demand, only on nodes matching the selector",
        }
    if rule.unsatisfiable_until_s is not None and rule.unsatisfiable_until_s > now_s:
        return {
            "state": "cooling_down",
            "replicas": loaded,
            "message": (
                f"unsatisfiable; retried after {_iso(rule.unsatisfiable_until_s)} or when a node registers, is "
                f"approved, relabelled or re-budgeted: {rule.unsatisfiable_reason}"
            ),
        }
    if rule.unsatisfiable_ticks:
        return {
            "state": "unsatisfiable",
            "replicas": loaded,
            "message": (
                f"unsatisfiable ({rule.unsatisfiable_ticks}/{UNSATISFIABLE_TICKS} passes before a cooldown): "
                f"{rule.unsatisfiable_reason}"
            ),
        }
    if rule.unsatisfiable_reason:
        return {"state": "waiting", "replicas": loaded, "message": rule.unsatisfiable_reason}
    return {"state": "active", "replicas": loaded, "message": f"{loaded} replica(s) of {g.target} loaded"}


def rule_view(rule: SchedulingRule, g: Governance, loaded: int, now_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {"id": rule.id, "model_name": rule.model_name}
    if rule.node_selector:
        out["node_selector"] = selector_text(rule.node_selector)
    out.update(min_replicas=rule.min_replicas, max_replicas=rule.max_replicas)
    optional = {
        "spread_all": rule.spread_all,
        "route_policy": rule.route_policy,
        "balance_abs_threshold": rule.balance_abs_threshold,
        "balance_rel_threshold": rule.balance_rel_threshold,
        "min_prefix_match": rule.min_prefix_match,
        "unsatisfiable_until": _iso(rule.unsatisfiable_until_s),
    }
    out.update({k: v for k, v in optional.items() if v})
    out.update(
        unsatisfiable_ticks=rule.unsatisfiable_ticks,
        created_at=_iso(rule.created_s),
        updated_at=_iso(rule.updated_s),
        target=g.target,
        shadowed=bool(g.shadowed_by),
    )
    if g.shadowed_by:
        out["shadowed_by"] = g.shadowed_by
    status = rule_status(rule, g, loaded, now_s)
    if rule.record.reason and status["state"] not in ("inert", "shadowed"):
        status["autoscaler"] = rule.record.reason  # the last pass: why it scaled, or why not
    out.update(declared=rule.declared, status=status)
    out.update(rule.autoscale.to_json())
    if rule.autoscale.configured or rule.record.reason:
        out["autoscale"] = autoscale_view(rule, now_s)
    return out


def autoscale_view(rule: SchedulingRule, now_s: float) -> dict[str, Any]:
    """What the autoscaler made of the rule at its last pass (why it scaled or not), and the minimum now."""
    low, why_low = effective_min(rule, now_s)
    record = rule.record
    return {
        "min_replicas_now": low,
        "schedule": why_low or None,
        "last_pass": record.reason or None,
        "last_pass_at": _iso(record.checked_s),
        "over_target_passes": record.over_passes,
        "last_action": record.last_action or None,
        "last_action_at": _iso(record.last_action_s),
    }


async def autoscale_explain(state: FrontendState, model: str) -> dict[str, Any] | None:
    """The explain endpoint's `autoscaling`: the rule governing `model` and its last pass (None: no rule)."""
    rules = await scheduling_store.all_rules(state.pool)
    governance = govern(rules, _resolver(state))
    for rule in rules:
        g = governance[rule.model_name]
        if g.target == model and not g.shadowed_by:
            return {"rule": rule.model_name, **rule.autoscale.to_json(), **autoscale_view(rule, time.time())}
    return None


def _resolver(state: FrontendState) -> Callable[[str], Resolution]:
    return lambda name: resolve(name, set(state.configs), state.aliases)


async def _views(state: FrontendState, rules: list[SchedulingRule]) -> list[dict[str, Any]]:
    everything = await scheduling_store.all_rules(state.pool)  # shadowing is decided over every rule
    governance = govern(everything, _resolver(state))
    counts = await scheduling_store.loaded_counts(state.pool)
    now_s = time.time()
    return [
        rule_view(r, governance[r.model_name], counts.get(governance[r.model_name].target or "", 0), now_s)
        for r in rules
    ]


async def _set_rule(state: FrontendState, request: Request) -> Any:
    try:
        body = await json_body(request)
    except ValueError:
        return _error(400, 'request body is not valid JSON; send {"model_name": "...", ...}', "body")
    try:
        spec = parse_rule(body)
    except RuleInvalid as exc:
        return _error(400, f"invalid scheduling rule: {exc}", exc.field)
    resolver = _resolver(state)
    resolution = resolver(spec.model_name)
    if resolution.model is None:
        return _error(
            400,
            f"invalid scheduling rule: field 'model_name': {resolution.problem}; a rule keyed "
            "by an alias must govern a configured model",
            "model_name",
        )
    try:
        await scheduling_store.upsert_unless_governed(
            state.pool, spec, lambda rules: conflicting_rule(spec.model_name, rules, resolver)
        )
    except RuleConflict as exc:
        via = f" (alias of {resolution.model!r})" if resolution.via_alias else ""
        return _error(
            409,
            f"scheduling rule for {spec.model_name!r}{via} conflicts: model {resolution.model!r} "
            f"is already governed by scheduling rule {exc.rule!r}; one load serves every name of a "
            f"model, so only one rule may place it — update or delete rule {exc.rule!r} "
            f"(DELETE /api/nodes/scheduling/{exc.rule}) first",
            "model_name",
        )
    rule = await scheduling_store.get(state.pool, spec.model_name)
    if rule is not None:
        state.router.apply_route_rule(rule)  # this frontend at once; the others at their next view refresh
    return (
        (await _views(state, [rule]))[0] if rule else _error(404, f"rule {spec.model_name!r} vanished; retry")
    )


def build_scheduling_rules_router(state: FrontendState) -> APIRouter:
    """Include after `scheduling_api` so `GET /api/nodes/scheduling/explain` keeps its route."""
    router = APIRouter(prefix="/api/nodes/scheduling")

    @router.get("")
    async def list_rules() -> Any:
        return await _views(state, await scheduling_store.all_rules(state.pool))

    @router.get("/{model:path}")
    async def get_rule(model: RuleName) -> Any:
        rule = await scheduling_store.get(state.pool, model)
        if rule is None:
            return _error(
                404, f"no scheduling rule for {model!r}; create one with POST /api/nodes/scheduling"
            )
        return (await _views(state, [rule]))[0]

    @router.post("", openapi_extra=RULE_BODY)
    async def set_rule(request: Request) -> Any:
        return await _set_rule(state, request)

    @router.delete("/{model:path}")
    async def delete_rule(model: RuleName) -> Any:
        if not await scheduling_store.delete(state.pool, model):
            return _error(404, f"no scheduling rule for {model!r}")
        state.router.forget_route_rule(model)
        return Response(status_code=204)

    return router
