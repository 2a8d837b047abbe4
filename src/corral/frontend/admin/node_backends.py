"""Admin backend operations per node (reference §4.3) and the fan-out install (corral's addition).

* `GET /api/nodes/<id>/backends` — the worker's `backend.list` (agent nodes: `[]`).
* `POST /api/nodes/<id>/backends/install` `{"backend"?, "backend_galleries"?, "uri"?, "name"?, "alias"?}`
  and `…/upgrade` `{"backend"}` — 202 `{"jobID", "statusUrl": "/api/backends/job/<jobID>", "message"}`.
  The request is a durable intent (`pending_backend_ops`) driven by `control.backend_ops` on any
  frontend; a request for an intent already queued joins it (same jobID).
* `POST /api/nodes/<id>/backends/delete` `{"backend"}` — synchronous `backend.delete`; the replica rows
  of the processes the worker reports stopped are removed.
* `POST /api/backends/install` `{"backend", …, "node_ids": [..]}` or `{"backend", …, "selector": {label:
  value}}` (exactly one of the two) — one intent per node under one job. `GET /api/backends/job/<id>`
  then gives the reference's job fields plus `summary` ("2 of 5 nodes done"), `done`, `failed`,
  `total` and one row per node (`state` ∈ Queued / Installing / Upgrading / Downloading / Worker busy /
  Done / Failed, current file, bytes, error).
"""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any

import asyncpg
from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse

from corral.bus import client as bus
from corral.bus import subjects
from corral.bus.messages import BackendDeleteReply, BackendDeleteRequest, BackendListReply, Message
from corral.frontend.admin.node_requests import (
    URI_MAX,
    BadRequest,
    NodeId,
    backend_node,
    bus_failure,
    galleries_field,
    name_field,
    object_body,
    text_field,
)
from corral.frontend.admin.operation_views import job_view
from corral.frontend.bounds import NODE_ID_MAX
from corral.frontend.json_body import documented_body
from corral.frontend.node_api.identity import node_error
from corral.frontend.state import FrontendState
from corral.nodes.backend_ops import DELETE_KNOB, NODE_OP_KNOB, forget_processes
from corral.store import backend_ops, operations
from corral.store import nodes as node_store

log = logging.getLogger(__name__)

FANOUT_NODES_MAX = 1000
SELECTOR_MAX = 32
INSTALL_BODY = documented_body(
    {
        "type": "object",
        "properties": {
            "backend": {"type": "string", "maxLength": 255},
            "uri": {"type": "string", "maxLength": URI_MAX},
            "name": {"type": "string", "maxLength": 255},
            "alias": {"type": "string", "maxLength": 255},
            "backend_galleries": {"type": "array", "items": {"type": "object"}},
        },
    }
)
BACKEND_BODY = documented_body(
    {
        "type": "object",
        "required": ["backend"],
        "properties": {"backend": {"type": "string", "maxLength": 255}},
    }
)
FANOUT_BODY = documented_body(
    {
        "type": "object",
        "required": ["backend"],
        "properties": {
            "backend": {"type": "string", "maxLength": 255},
            "node_ids": {
                "type": "array",
                "items": {"type": "string", "maxLength": NODE_ID_MAX},
                "maxItems": FANOUT_NODES_MAX,
            },
            "selector": {"type": "object", "additionalProperties": {"type": "string"}},
            "backend_galleries": {"type": "array", "items": {"type": "object"}},
        },
    }
)
JobId = Annotated[str, Path(max_length=64)]


def install_fields(body: dict[str, Any]) -> tuple[str, str | None, dict[str, str]]:
    """(intent backend name, galleries, {uri, name, alias}) of an install request."""
    backend = name_field(body, "backend", required=False)
    uri = text_field(body, "uri", URI_MAX)
    name = name_field(body, "name", required=False)
    alias = name_field(body, "alias", required=False)
    if not backend and not uri:
        raise BadRequest("backend", "is required (a backend name from a gallery), or give 'uri' and 'name'")
    if uri and not (name or backend):
        raise BadRequest("name", "is required with 'uri' (the name the backend is installed under)")
    request = {k: v for k, v in (("uri", uri), ("name", name), ("alias", alias)) if v}
    return backend or name, galleries_field(body), request


def accepted(op_id: str, message: str) -> JSONResponse:
    return JSONResponse(
        {"jobID": op_id, "statusUrl": f"/api/backends/job/{op_id}", "message": message}, status_code=202
    )


def build_node_backends_router(state: FrontendState) -> APIRouter:
    router = APIRouter()
    _add_list_and_delete(router, state)
    _add_async_ops(router, state)
    _add_fanout(router, state)
    return router


async def queue_intent(
    state: FrontendState,
    node: asyncpg.Record,
    backend: str,
    op: str,
    *,
    galleries: str | None = None,
    request: dict[str, str] | None = None,
    parent_id: str | None = None,
) -> str:
    op_type = operations.BACKEND_UPGRADE if op == backend_ops.UPGRADE else operations.BACKEND_INSTALL
    new = operations.NewOperation(
        backend,
        op_type,
        node["id"],
        node["name"],
        parent_id=parent_id,
        message=f"queued: {op} of {backend} on {node['name']}",
    )
    op_id, _new = await backend_ops.record(
        state.pool,
        node["id"],
        backend,
        op,
        new,
        galleries=galleries,
        request=request,
        take_over=parent_id is not None,
    )
    if state.backend_ops is not None:
        state.backend_ops.kick()
    return op_id


def _add_list_and_delete(router: APIRouter, state: FrontendState) -> None:
    @router.get("/api/nodes/{node_id}/backends")
    async def list_backends(node_id: NodeId) -> Any:
        node = await backend_node(state.pool, node_id)
        if isinstance(node, JSONResponse):
            return node
        if node["node_type"] == "agent":
            return []
        try:
            reply = await bus.request(
                state.nc,
                subjects.backend_list(node_id),
                Message(),
                BackendListReply,
                state.backend_op_settings().node_op_timeout_s,
                NODE_OP_KNOB,
            )
        except bus.BusError as exc:
            return bus_failure(exc)
        if reply.error:
            return node_error(502, f"worker {node['name']} could not list its backends: {reply.error}")
        return [b.model_dump(exclude_none=True) for b in reply.backends]

    @router.post("/api/nodes/{node_id}/backends/delete", openapi_extra=BACKEND_BODY)
    async def delete_backend(node_id: NodeId, request: Request) -> Any:
        try:
            backend = name_field(await object_body(request), "backend")
        except BadRequest as exc:
            return exc.response()
        node = await backend_node(state.pool, node_id)
        if isinstance(node, JSONResponse):
            return node
        row = await operations.insert(
            state.pool,
            operations.NewOperation(backend, operations.BACKEND_DELETE, node["id"], node["name"]),
            status=operations.PROCESSING,
        )
        try:
            reply = await bus.request(
                state.nc,
                subjects.backend_delete(node_id),
                BackendDeleteRequest(backend=backend),
                BackendDeleteReply,
                state.backend_op_settings().delete_timeout_s,
                DELETE_KNOB,
            )
        except bus.BusError as exc:
            await operations.finish(state.pool, row["id"], operations.FAILED, str(exc))
            return bus_failure(exc)
        stopped = reply.stopped_process_keys or []
        forgotten = await forget_processes(state.pool, state.nc, node, stopped)
        if not reply.success:
            error = reply.error or "the worker refused the delete without saying why"
            await operations.finish(state.pool, row["id"], operations.FAILED, error)
            return node_error(502, f"worker {node['name']} could not delete backend {backend!r}: {error}")
        await operations.finish(
            state.pool,
            row["id"],
            operations.COMPLETED,
            message=f"stopped {', '.join(stopped) or 'no process'}; {forgotten} replica row(s) removed",
        )
        log.info("backend %s deleted on %s (stopped %s)", backend, node["name"], stopped)
        return {"message": "backend deleted", "stopped_process_keys": stopped}


def _add_async_ops(router: APIRouter, state: FrontendState) -> None:
    async def queue(node_id: str, request: Request, op: str, message: str) -> Any:
        """Install and upgrade alike: check the body and the node, then queue a durable intent (202)."""
        try:
            backend, galleries, extra = install_fields(await object_body(request))
        except BadRequest as exc:
            return exc.response()
        node = await backend_node(state.pool, node_id)
        if isinstance(node, JSONResponse):
            return node
        if refusal := _refuse_node(node):
            return refusal
        op_id = await queue_intent(state, node, backend, op, galleries=galleries, request=extra)
        return accepted(op_id, message)

    @router.post("/api/nodes/{node_id}/backends/install", status_code=202, openapi_extra=INSTALL_BODY)
    async def install(node_id: NodeId, request: Request) -> Any:
        return await queue(node_id, request, backend_ops.INSTALL, "backend installation started")

    @router.post("/api/nodes/{node_id}/backends/upgrade", status_code=202, openapi_extra=INSTALL_BODY)
    async def upgrade(node_id: NodeId, request: Request) -> Any:
        return await queue(node_id, request, backend_ops.UPGRADE, "backend upgrade started")

    @router.get("/api/backends/job/{job_id}")
    async def job(job_id: JobId) -> Any:
        row = await operations.get(state.pool, job_id)
        if row is None:
            return node_error(404, f"job {job_id} not found")
        kids = await operations.children(state.pool, job_id) if row["op_type"] == operations.FANOUT else None
        return job_view(row, kids)


def _refuse_node(node: asyncpg.Record) -> JSONResponse | None:
    if node["node_type"] == "agent":
        return node_error(400, f"node {node['name']} is an agent node: it runs no backends")
    if node["status"] in (node_store.DRAINING, node_store.PENDING):
        return node_error(
            409,
            f"node {node['name']} is {node['status']}: backends are installed only on "
            "approved nodes that are not draining",
        )
    return None


def _selector(body: dict[str, Any]) -> dict[str, str]:
    selector = body.get("selector")
    if (
        not isinstance(selector, dict)
        or not selector
        or len(selector) > SELECTOR_MAX
        or not all(
            isinstance(k, str) and isinstance(v, str) and len(k) <= 128 and len(v) <= 255
            for k, v in selector.items()
        )
    ):
        raise BadRequest("selector", f"must be an object of 1 to {SELECTOR_MAX} label: value strings")
    return selector


def _node_ids(body: dict[str, Any]) -> list[str]:
    ids = body.get("node_ids")
    if (
        not isinstance(ids, list)
        or not ids
        or len(ids) > FANOUT_NODES_MAX
        or not all(isinstance(i, str) and 0 < len(i) <= NODE_ID_MAX for i in ids)
    ):
        raise BadRequest("node_ids", f"must be a list of 1 to {FANOUT_NODES_MAX} node ids")
    return list(dict.fromkeys(ids))


async def _fanout_targets(state: FrontendState, body: dict[str, Any]) -> list[asyncpg.Record]:
    if ("node_ids" in body) == ("selector" in body):
        raise BadRequest(
            "node_ids",
            "or 'selector' is required, not both: the node ids to install on, or a {label: value} selector",
        )
    nodes = [n for n in await node_store.listing(state.pool) if n["node_type"] != "agent"]
    if "node_ids" in body:
        wanted = _node_ids(body)
        by_id = {n["id"]: n for n in nodes}
        missing = [i for i in wanted if i not in by_id]
        if missing:
            raise LookupError(f"node(s) not found: {', '.join(missing[:10])}")
        return [by_id[i] for i in wanted]
    selector = _selector(body)

    def matches(node: asyncpg.Record) -> bool:
        labels = json.loads(node["labels"]) if isinstance(node["labels"], str) else dict(node["labels"] or {})
        return all(labels.get(k) == v for k, v in selector.items())

    return [n for n in nodes if n["status"] == node_store.HEALTHY and matches(n)]


def _add_fanout(router: APIRouter, state: FrontendState) -> None:
    @router.post("/api/backends/install", status_code=202, openapi_extra=FANOUT_BODY)
    async def install_many(request: Request) -> Any:
        try:
            body = await object_body(request)
            backend, galleries, extra = install_fields(body)
            targets = await _fanout_targets(state, body)
        except BadRequest as exc:
            return exc.response()
        except LookupError as exc:
            return node_error(404, str(exc))
        if not targets:
            return node_error(404, "no healthy backend node matches the selector")
        for node in targets:
            if refusal := _refuse_node(node):
                return refusal
        parent = await operations.insert(
            state.pool,
            operations.NewOperation(
                backend, operations.FANOUT, message=f"install of {backend} on {len(targets)} node(s)"
            ),
            status=operations.PROCESSING,
        )
        for node in targets:
            await queue_intent(
                state,
                node,
                backend,
                backend_ops.INSTALL,
                galleries=galleries,
                request=extra,
                parent_id=parent["id"],
            )
        return accepted(parent["id"], f"backend installation started on {len(targets)} node(s)")
