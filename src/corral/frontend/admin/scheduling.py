"""Admin: explain a placement decision, and runtime settings shared by every frontend."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from corral.frontend.admin.scheduling_rules import autoscale_explain
from corral.frontend.bounds import NAME_MAX
from corral.frontend.errors import envelope
from corral.frontend.json_body import documented_body, json_body
from corral.frontend.state import FrontendState
from corral.loading.job_placement import DISK_CHECK_SETTING, placement_request
from corral.placement.errors import NoNodeAvailable
from corral.placement.pipeline import decide
from corral.placement.rejection import NoNodeFits
from corral.store import placement as placement_store
from corral.store import settings as settings_store

RUNTIME_SETTINGS: dict[str, type] = {DISK_CHECK_SETTING: bool}
DEFAULTS: dict[str, Any] = {DISK_CHECK_SETTING: True}


def _bad(message: str, field: str) -> JSONResponse:
    return JSONResponse(envelope(message, "invalid_request_error", "invalid_value", field), status_code=400)


def _validate_settings(body: Any) -> JSONResponse | None:
    if not isinstance(body, dict) or not body:
        return _bad("send a JSON object with at least one setting", "body")
    for key, value in body.items():
        kind = RUNTIME_SETTINGS.get(key)
        if kind is None:
            return _bad(f"unknown setting {key!r}; known: {', '.join(RUNTIME_SETTINGS)}", key)
        if not isinstance(value, kind):
            return _bad(f"setting {key!r} must be a {kind.__name__}, got {value!r}", key)
    return None


def routing_explain(state: FrontendState, model: str) -> dict[str, Any]:
    """The warm path of `model` on this frontend: its picker and policy, its replicas' loads and circuit breakers,
    and the last pick (which picker chose which replica, and why)."""
    view = state.router.view
    policy = view.policies.get(model)
    last = view.decisions.get(model)
    return {
        "picker": policy.picker,
        "policy_source": policy.source,
        "min_prefix_match": policy.min_prefix_match,
        "balance_abs_threshold": policy.balance_abs,
        "balance_rel_threshold": policy.balance_rel,
        "replicas": [
            {
                "replica": r.key,
                "node": r.node_name,
                "in_flight": state.router.inflight.total(r),
                "breaker": view.breakers.explain(r.key),  # this frontend's circuit breaker of the replica
            }
            for r in view.all()
            if r.model == model
        ],
        "last_decision": last.explain() if last else None,
    }


def build_scheduling_router(state: FrontendState) -> APIRouter:
    router = APIRouter()

    @router.get("/api/nodes/scheduling/explain")
    async def explain(model: Annotated[str, Query(max_length=NAME_MAX)] = "") -> JSONResponse:
        cfg = state.configs.get(model)
        if cfg is None:
            return JSONResponse(
                envelope(
                    f"model {model!r} not found; pass ?model=<configured model name>",
                    "not_found_error",
                    404,
                    "model",
                ),
                status_code=404,
            )
        req = await placement_request(state.router.ctx, cfg)
        nodes = await placement_store.snapshot(state.pool)
        routing = routing_explain(state, cfg.name)
        extra = {"routing": routing, "autoscaling": await autoscale_explain(state, cfg.name)}  # issue 25
        try:
            return JSONResponse({**decide(req, nodes).explain(), **extra})
        except NoNodeFits as exc:
            verdicts = [
                {"node": name, "fits": False, "filter": r.filter, "reason": r.reason, "detail": r.detail}
                for name, r in sorted(exc.rejections.items())
            ]
            return JSONResponse(
                {"model": model, "chosen": None, "error": str(exc), "nodes": verdicts, **extra}
            )
        except NoNodeAvailable as exc:
            return JSONResponse({"model": model, "chosen": None, "error": str(exc), "nodes": [], **extra})

    @router.get("/api/settings")
    async def get_settings() -> JSONResponse:
        return JSONResponse({**DEFAULTS, **await settings_store.all_settings(state.pool)})

    @router.post(
        "/api/settings",
        openapi_extra=documented_body(
            {"type": "object", "properties": {key: {"type": "boolean"} for key in RUNTIME_SETTINGS}}
        ),
    )
    async def post_settings(request: Request) -> JSONResponse:
        try:
            body = await json_body(request)
        except ValueError:
            return _bad(
                "request body is not valid JSON; send an object like "
                '{"distributed_disk_headroom_check": false}',
                "body",
            )
        refused = _validate_settings(body)
        if refused is not None:
            return refused
        for key, value in body.items():
            await settings_store.put(state.pool, key, value)
        return JSONResponse({**DEFAULTS, **await settings_store.all_settings(state.pool)})

    return router
