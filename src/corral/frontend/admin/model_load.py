"""`POST /api/model-configs/{name}/load` (admin): start loading a model without sending it a request.

The load runs as a request's cold path would (the model's durable load job, placement, install,
staging, LoadModel) in a task of this frontend; the answer returns at once: 202 while it runs
(follow `GET /api/models/{name}/load-status`, as `corral models load --follow` does), 200 when a
replica is already loaded. A client that goes away never cancels the load.
"""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from corral.frontend.admin.model_configs import ConfigName
from corral.frontend.errors import APIError, api_error_response
from corral.frontend.inference.openai import config_for
from corral.frontend.state import FrontendState
from corral.models.config import ModelConfig

log = logging.getLogger(__name__)


async def _load(state: FrontendState, cfg: ModelConfig) -> None:
    try:
        await state.router.route(cfg)
    except Exception as exc:  # the job row carries the outcome; load-status reports it
        log.info("load of %s requested by an admin did not finish within the wait: %s", cfg.name, exc)


def build_model_load_router(state: FrontendState) -> APIRouter:
    router = APIRouter(prefix="/api/model-configs")
    running: set[asyncio.Task[None]] = set()

    @router.post("/{name}/load")
    async def load(name: ConfigName) -> JSONResponse:
        try:
            cfg = config_for(state, name)
        except APIError as exc:
            return api_error_response(exc)
        status_url = f"/api/models/{cfg.name}/load-status"
        if state.router.view.count(cfg.name) > 0:
            return JSONResponse({"model": cfg.name, "state": "loaded", "status_url": status_url})
        task = asyncio.create_task(_load(state, cfg), name=f"admin-load:{cfg.name}")
        running.add(task)
        task.add_done_callback(running.discard)
        return JSONResponse(
            {"model": cfg.name, "state": "pending", "status_url": status_url}, status_code=202
        )

    return router
