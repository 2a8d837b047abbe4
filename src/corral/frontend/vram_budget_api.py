"""Admin: `PUT/DELETE /api/nodes/<id>/vram-budget` (sticky across worker re-registration)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from corral.frontend.errors import envelope
from corral.frontend.state import FrontendState
from corral.placement.vram_budget import ACCEPTED, BadVramBudget
from corral.store import vram_budget


def build_vram_budget_router(state: FrontendState) -> APIRouter:
    router = APIRouter(prefix="/api/nodes")

    def _missing(node_id: str) -> JSONResponse:
        return JSONResponse(envelope(f"node {node_id} not found", "not_found_error", 404), status_code=404)

    @router.put("/{node_id}/vram-budget")
    async def put_budget(node_id: str, request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            body = None
        value = body.get("value") if isinstance(body, dict) else None
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            return JSONResponse(envelope(f'send {{"value": ...}} with {ACCEPTED}', "invalid_request_error",
                                         "invalid_value", "value"), status_code=400)
        try:
            found = await vram_budget.set_budget(state.pool, node_id, str(value))
        except BadVramBudget as exc:
            return JSONResponse(envelope(str(exc), "invalid_request_error", "invalid_value", "value"), status_code=400)
        return JSONResponse({"vram_budget": str(value)}) if found else _missing(node_id)

    @router.delete("/{node_id}/vram-budget")
    async def delete_budget(node_id: str) -> JSONResponse:
        found = await vram_budget.set_budget(state.pool, node_id, "")
        return JSONResponse({"reset": True}) if found else _missing(node_id)

    return router
