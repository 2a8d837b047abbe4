"""Admin: `PUT/DELETE /api/nodes/<id>/vram-budget` (sticky across worker re-registration)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse

from corral.frontend.bounds import NODE_ID_MAX
from corral.frontend.errors import envelope
from corral.frontend.json_body import documented_body, json_body
from corral.frontend.state import FrontendState
from corral.placement.vram_budget import ACCEPTED, BadVramBudget
from corral.store import vram_budget

BUDGET_TEXT_MAX = 32  # backend_nodes.vram_budget varchar(32)
BUDGET_BODY = documented_body(
    {
        "type": "object",
        "required": ["value"],
        "properties": {"value": {"type": "string", "maxLength": BUDGET_TEXT_MAX, "description": ACCEPTED}},
    }
)
NodeId = Annotated[str, Path(max_length=NODE_ID_MAX)]


def _bad(message: str) -> JSONResponse:
    return JSONResponse(envelope(message, "invalid_request_error", "invalid_value", "value"), status_code=400)


def build_vram_budget_router(state: FrontendState) -> APIRouter:
    router = APIRouter(prefix="/api/nodes")

    def _missing(node_id: str) -> JSONResponse:
        return JSONResponse(envelope(f"node {node_id} not found", "not_found_error", 404), status_code=404)

    @router.put("/{node_id}/vram-budget", openapi_extra=BUDGET_BODY)
    async def put_budget(node_id: NodeId, request: Request) -> JSONResponse:
        try:
            body = await json_body(request)
        except ValueError:
            body = None
        value = body.get("value") if isinstance(body, dict) else None
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            return _bad(f'send {{"value": ...}} with {ACCEPTED}')
        text = str(value)
        if len(text) > BUDGET_TEXT_MAX:
            return _bad(
                f"invalid request: field 'value': must be at most {BUDGET_TEXT_MAX} characters; "
                f"use {ACCEPTED}"
            )
        try:
            found = await vram_budget.set_budget(state.pool, node_id, text)
        except BadVramBudget as exc:
            return _bad(str(exc))
        return JSONResponse({"vram_budget": text}) if found else _missing(node_id)

    @router.delete("/{node_id}/vram-budget")
    async def delete_budget(node_id: NodeId) -> JSONResponse:
        found = await vram_budget.set_budget(state.pool, node_id, "")
        return JSONResponse({"reset": True}) if found else _missing(node_id)

    return router
