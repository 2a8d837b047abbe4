"""`/api/models/*`: model state outside the OpenAI surface (load progress)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import JSONResponse

from corral.frontend.bounds import NAME_MAX
from corral.frontend.errors import envelope
from corral.frontend.state import FrontendState
from corral.loading.status import loading_object
from corral.store import load_jobs


def build_models_router(state: FrontendState) -> APIRouter:
    router = APIRouter(prefix="/api/models")

    @router.get("/{model_id}/load-status")
    async def load_status(model_id: Annotated[str, Path(max_length=NAME_MAX)]) -> JSONResponse:
        job = await load_jobs.get(state.pool, model_id)
        if job is None:
            return JSONResponse(envelope(f"no load is running for model {model_id}", "not_found_error", 404),
                                status_code=404)
        return JSONResponse(loading_object(job))

    return router
