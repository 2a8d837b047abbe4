"""`/api/agent-jobs`: start an MCP CI job or an agent chat on the agent workers, read it, cancel it. Admin-only."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field

from corral.agents.client import NoAgentWorker
from corral.agents.recorder import JobRecorder
from corral.frontend.bounds import NODE_ID_MAX, ModelName
from corral.frontend.errors import APIError
from corral.frontend.inference.openai import config_for
from corral.frontend.node_api.routes import jsonable
from corral.frontend.state import FrontendState
from corral.store import agent_jobs

PROMPT_MAX = 1 << 20
JobId = Annotated[str, Path(max_length=NODE_ID_MAX)]


class NewJob(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["mcp-ci", "agent"] = "mcp-ci"
    model: ModelName
    prompt: str = Field(min_length=1, max_length=PROMPT_MAX)


def _job(row: Any) -> dict[str, Any]:
    out = jsonable(row)
    if isinstance(out.get("trace"), str):
        out["trace"] = json.loads(out["trace"])
    return out


def build_agent_jobs_router(state: FrontendState, recorder: JobRecorder, max_iterations: int) -> APIRouter:
    router = APIRouter(prefix="/api/agent-jobs")

    @router.post("", status_code=202)
    async def create(body: NewJob) -> Any:
        cfg = config_for(state, body.model)
        if not cfg.mcp:
            raise APIError(
                400,
                f"model {cfg.name!r} has no MCP servers (an `mcp:` block in its config); agent "
                "jobs need them",
                "invalid_request_error",
                "invalid_value",
                "model",
            )
        try:
            job_id = await recorder.submit(body.kind, cfg, body.prompt, max_iterations)
        except NoAgentWorker as exc:
            raise APIError(
                503, str(exc), "server_error", "no_agent_worker", headers={"Retry-After": "5"}
            ) from None
        return {"id": job_id, "status": "queued"}

    @router.get("")
    async def listing() -> Any:
        return [jsonable(r) for r in await agent_jobs.listing(state.pool)]

    @router.get("/{job_id}")
    async def get(job_id: JobId) -> Any:
        row = await agent_jobs.get(state.pool, job_id)
        if row is None:
            raise APIError(
                404, f"agent job {job_id} not found", "invalid_request_error", "not_found", "job_id"
            )
        return _job(row)

    @router.post("/{job_id}/cancel")
    async def cancel(job_id: JobId) -> Any:
        row = await agent_jobs.get(state.pool, job_id)
        if row is None:
            raise APIError(
                404, f"agent job {job_id} not found", "invalid_request_error", "not_found", "job_id"
            )
        if row["status"] in agent_jobs.FINISHED:
            raise APIError(
                409,
                f"agent job {job_id} is already {row['status']}",
                "invalid_request_error",
                "conflict",
                "job_id",
            )
        await recorder.cancel(row["kind"], job_id)
        return {"id": job_id, "message": "cancel requested"}

    return router
