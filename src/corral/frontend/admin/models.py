"""`/api/models/*`: model state outside the OpenAI surface (load progress)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import JSONResponse

from corral.frontend.bounds import NAME_MAX
from corral.frontend.errors import envelope
from corral.frontend.state import FrontendState
from corral.loading.request_status import loading_object
from corral.store import load_jobs

LOADS_MAX = 500  # load jobs listed at once: one per model being loaded


def build_models_router(state: FrontendState) -> APIRouter:
    router = APIRouter(prefix="/api/models")

    @router.get("/loads")
    async def loads() -> JSONResponse:
        """Every running load (and every failed one within its grace window), for the web UI's progress bars."""
        jobs = await load_jobs.listing(state.pool, LOADS_MAX)
        return JSONResponse(
            {
                "loads": [
                    {
                        **loading_object(job),
                        "error": job.last_error or None,
                        "error_kind": job.error_kind or None,
                    }
                    for job in jobs
                ]
            }
        )

    @router.get("/{model_id}/load-status")
    async def load_status(model_id: Annotated[str, Path(max_length=NAME_MAX)]) -> JSONResponse:
        job = await load_jobs.get(state.pool, model_id)
        if job is None:
            return JSONResponse(
                envelope(f"no load is running for model {model_id}", "not_found_error", 404), status_code=404
            )
        return JSONResponse(loading_object(job))

    return router
