"""Admin: `POST /api/nodes/<id>/models/unload` and `…/models/delete` `{"model_name"}` (reference §4.3).

Unload sends `model.unload`, which on corral's worker frees and stops exactly the named model's
processes and waits for them to exit; then every replica row of (node, model) is removed and
every frontend told. Delete does the same and then `model.delete`, so the files go too (the
reference leaves them, §9 #11). Both are recorded in the activity record.
"""

from __future__ import annotations

import logging
from typing import Any

import asyncpg
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from corral.bus import client as bus
from corral.bus import subjects
from corral.bus.messages import ModelDeleteRequest, ModelOpReply, ModelUnloadRequest
from corral.frontend.admin.node_requests import (
    BadRequest,
    NodeId,
    backend_node,
    bus_failure,
    name_field,
    object_body,
)
from corral.frontend.json_body import documented_body
from corral.frontend.node_api.identity import node_error
from corral.frontend.state import FrontendState
from corral.nodes.backend_ops import NODE_OP_KNOB
from corral.routing import events
from corral.store import operations

log = logging.getLogger(__name__)

MODEL_BODY = documented_body(
    {
        "type": "object",
        "required": ["model_name"],
        "properties": {"model_name": {"type": "string", "maxLength": 255}},
    }
)


async def forget_model(pool: asyncpg.Pool, nc: Any, node: asyncpg.Record, model: str) -> int:
    rows = await pool.fetch(
        "DELETE FROM node_models WHERE node_id = $1 AND model_name = $2 RETURNING replica_index, address",
        node["id"],
        model,
    )
    for row in rows:
        await events.publish(
            nc,
            events.ReplicaEvent(
                events.REMOVED, model, node["id"], node["name"], int(row["replica_index"]), row["address"]
            ),
        )
    return len(rows)


def build_node_models_router(state: FrontendState) -> APIRouter:
    router = APIRouter(prefix="/api/nodes")

    async def call(node_id: str, subject: str, payload: Any) -> ModelOpReply:
        timeout_s = state.backend_op_settings().node_op_timeout_s
        reply: ModelOpReply = await bus.request(
            state.nc, subject, payload, ModelOpReply, timeout_s, NODE_OP_KNOB
        )
        return reply

    async def run(node_id: str, request: Request, *, delete: bool) -> Any:
        try:
            model = name_field(await object_body(request), "model_name", backend=False)
        except BadRequest as exc:
            return exc.response()
        node = await backend_node(state.pool, node_id)
        if isinstance(node, JSONResponse):
            return node
        op_type = operations.MODEL_DELETE if delete else operations.MODEL_UNLOAD
        row = await operations.insert(
            state.pool,
            operations.NewOperation(model, op_type, node["id"], node["name"]),
            status=operations.PROCESSING,
        )
        try:
            reply = await call(node_id, subjects.model_unload(node_id), ModelUnloadRequest(model_name=model))
            stopped = reply.stopped_process_keys or []
            if reply.success and delete:
                reply = await call(
                    node_id, subjects.model_delete(node_id), ModelDeleteRequest(model_name=model)
                )
        except bus.BusError as exc:
            await operations.finish(state.pool, row["id"], operations.FAILED, str(exc))
            return bus_failure(exc)
        removed = await forget_model(state.pool, state.nc, node, model) if reply.success else 0
        if not reply.success:
            error = reply.error or "the worker refused without saying why"
            await operations.finish(state.pool, row["id"], operations.FAILED, error)
            return node_error(502, f"worker {node['name']}: {error}")
        await operations.finish(
            state.pool,
            row["id"],
            operations.COMPLETED,
            message=f"stopped {', '.join(stopped) or 'no process'}; {removed} replica row(s) "
            "removed" + ("; files deleted" if delete else ""),
        )
        log.info(
            "model %s %s on %s (stopped %s)",
            model,
            "deleted" if delete else "unloaded",
            node["name"],
            stopped,
        )
        return {
            "message": "model deleted from node" if delete else "model unloaded",
            "stopped_process_keys": stopped,
        }

    @router.post("/{node_id}/models/unload", openapi_extra=MODEL_BODY)
    async def unload(node_id: NodeId, request: Request) -> Any:
        return await run(node_id, request, delete=False)

    @router.post("/{node_id}/models/delete", openapi_extra=MODEL_BODY)
    async def delete(node_id: NodeId, request: Request) -> Any:
        return await run(node_id, request, delete=True)

    return router
