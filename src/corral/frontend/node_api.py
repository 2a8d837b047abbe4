"""`/api/node/*`: worker self-service (register, heartbeat, drain, resume, deregister, models)."""

from __future__ import annotations

import hmac
import logging
from typing import Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field, ValidationError

from corral.control.heartbeat_rules import Beat
from corral.frontend.auth import check_registration_token
from corral.frontend.bounds import (
    LABELS_MAX,
    NAME_MAX,
    TOKEN_MAX,
    ByteCount,
    LabelKey,
    LabelValue,
    ReplicasPerModel,
)
from corral.frontend.state import FrontendState
from corral.store import nodes as node_store
from corral.store import replicas as replica_store
from corral.store import vram_budget

log = logging.getLogger(__name__)


class RegisterNodeRequest(BaseModel):
    """Each bound is its backend_nodes / node_labels column's (varchar(N), bigint)."""

    name: str = Field(min_length=1, max_length=NAME_MAX)
    node_type: Literal["backend", "agent"] = "backend"
    address: str = Field(default="", max_length=NAME_MAX)
    http_address: str = Field(default="", max_length=NAME_MAX)
    token: str = Field(default="", max_length=TOKEN_MAX)
    total_vram: ByteCount = 0
    available_vram: ByteCount = 0
    total_ram: ByteCount = 0
    available_ram: ByteCount = 0
    total_disk: ByteCount = 0
    available_disk: ByteCount = 0
    gpu_vendor: str = Field(default="", max_length=32)
    gpu_compute_capability: str = Field(default="", max_length=16)
    capability: str = Field(default="", max_length=64)
    labels: dict[LabelKey, LabelValue] = Field(default={}, max_length=LABELS_MAX)
    max_replicas_per_model: ReplicasPerModel = 1
    vram_budget: str = Field(default="", max_length=32)


class HeartbeatUpdate(BaseModel):
    available_vram: ByteCount | None = None
    total_vram: ByteCount | None = None
    available_ram: ByteCount | None = None
    available_disk: ByteCount | None = None
    total_disk: ByteCount | None = None
    gpu_vendor: str | None = Field(default=None, max_length=32)


def node_error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": status, "message": message, "type": "node_error"}}, status_code=status)


def jsonable(row: Any) -> dict[str, Any]:
    out = {}
    for key, value in dict(row).items():
        if key in ("model_opts_blob", "token_hash"):
            continue
        out[key] = value.isoformat() if hasattr(value, "isoformat") else value
    return out


def _token_refusal(state: FrontendState, presented: str) -> JSONResponse | None:
    if not state.registration_token:
        return None
    if not presented:
        return node_error(401, "registration token required")
    if not hmac.compare_digest(node_store.token_hash(presented), node_store.token_hash(state.registration_token)):
        return node_error(401, "invalid registration token")
    return None


async def _register(state: FrontendState, body: RegisterNodeRequest) -> JSONResponse:
    refused = _token_refusal(state, body.token)
    if refused is not None:
        return refused
    if body.node_type == "backend" and not body.address:
        return node_error(400, "field 'address' is required for backend nodes (the worker's gRPC host:port)")
    facts = node_store.NodeFacts(**body.model_dump(exclude={"token", "labels"}))
    row = await node_store.register(state.pool, facts, body.token, body.labels, auto_approve=state.auto_approve_nodes)
    await vram_budget.refresh(state.pool, row["id"])  # resolve the (possibly sticky) budget against this VRAM
    state.router.view.remove_node(row["id"])
    await node_changed(state, row["id"], row["status"])
    log.info("node %s (%s) registered at %s, status %s", row["name"], row["id"], row["address"], row["status"])
    reply = {"id": row["id"], "name": row["name"], "node_type": row["node_type"], "status": row["status"],
             "created_at": row["created_at"].isoformat()}
    if state.lifecycle is not None and state.lifecycle.minter is not None:
        reply.update(state.lifecycle.minter.credentials(row))
    return JSONResponse(reply, status_code=201)


async def node_changed(state: FrontendState, node_id: str, status: str) -> None:
    """A node's status changed here: stop routing to it unless healthy, and tell every frontend."""
    if status != node_store.HEALTHY:
        state.router.view.remove_node(node_id)
    if state.lifecycle is not None:
        await state.lifecycle.node_changed(node_id, status)


async def set_status(state: FrontendState, node_id: str, status: str, message: str, drop: bool) -> Any:
    if not await node_store.set_status(state.pool, node_id, status, drop_replicas=drop):
        return node_error(404, f"node {node_id} not found")
    await node_changed(state, node_id, status)
    return {"message": message}


async def record_heartbeat(state: FrontendState, node_id: str, update: HeartbeatUpdate) -> bool:
    if state.lifecycle is None:
        return await node_store.heartbeat(state.pool, node_id, update.model_dump(exclude_none=True)) is not None
    return bool(await state.lifecycle.checkpointer.beat(node_id, Beat(**update.model_dump())))


def build_node_router(state: FrontendState) -> APIRouter:
    router = APIRouter(prefix="/api/node")

    @router.post("/register", status_code=201)
    async def register(body: RegisterNodeRequest) -> Any:
        return await _register(state, body)

    @router.post("/{node_id}/heartbeat")
    async def heartbeat(node_id: str, request: Request) -> Any:
        raw = await request.body()
        try:
            update = HeartbeatUpdate.model_validate_json(raw) if raw.strip() else HeartbeatUpdate()
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first.get("loc", ())) or "body"
            return node_error(400, f"invalid heartbeat: field '{field}': {first.get('msg', 'invalid value')}")
        if not await record_heartbeat(state, node_id, update):
            return node_error(404, f"node {node_id} not found; register again")
        return {"message": "heartbeat received"}

    async def _status(node_id: str, status: str, message: str, drop: bool) -> Any:
        return await set_status(state, node_id, status, message, drop)

    @router.post("/{node_id}/drain")
    async def drain(node_id: str) -> Any:
        return await _status(node_id, node_store.DRAINING, "node set to draining", False)

    @router.post("/{node_id}/resume")
    async def resume(node_id: str) -> Any:
        node = await node_store.get(state.pool, node_id)
        if node is not None and not node["approved"]:
            return node_error(409, f"node {node_id} is pending approval; an admin must approve it first")
        return await _status(node_id, node_store.HEALTHY, "node resumed", False)

    @router.post("/{node_id}/deregister")
    async def deregister(node_id: str) -> Any:
        return await _status(node_id, node_store.OFFLINE, "node set to offline", True)

    @router.delete("/{node_id}")
    async def delete(node_id: str) -> Any:
        return await _status(node_id, node_store.OFFLINE, "node set to offline", True)

    @router.get("/{node_id}/models")
    async def models(node_id: str) -> Any:
        return [jsonable(r) for r in await replica_store.of_node(state.pool, node_id)]

    return router


class _Refused(Exception):
    def __init__(self, response: JSONResponse) -> None:
        self.response = response


def install_node_api(app: FastAPI, state: FrontendState) -> None:
    async def require_token(request: Request) -> None:
        refused = check_registration_token(request, state.registration_token)
        if refused is not None:
            raise _Refused(refused)

    @app.exception_handler(_Refused)
    async def _refused(_request: Request, exc: _Refused) -> Response:
        return exc.response

    app.include_router(build_node_router(state), dependencies=[Depends(require_token)])
