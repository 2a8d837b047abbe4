"""`/api/nodes/*`: admin node management — list, inspect, approve, drain, resume, re-key, delete.

Admin auth is enforced for the whole prefix by `access.AccessControl`. Node ids in paths are
UUIDs, so sibling routes such as `/api/nodes/scheduling` (registered by other routers) are
never shadowed by `/api/nodes/{node_id}`.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from fastapi import APIRouter

from corral.frontend.node_api.identity import node_error
from corral.frontend.node_api.routes import agent_api_token, jsonable, node_changed
from corral.frontend.state import FrontendState
from corral.store import labels as label_store
from corral.store import nodes as node_store
from corral.store import replicas as replica_store

log = logging.getLogger(__name__)

LABEL_KEYS_MAX = 500  # label keys in the catalog answer (a cluster uses a few dozen)
LABEL_VALUES_MAX = 200  # values listed per key


def node_view(row: Any) -> dict[str, Any]:
    out = jsonable(row)
    if "credential_hash" in row.keys():
        out["credential_set"] = bool(row["credential_hash"])
    labels = out.get("labels")
    if isinstance(labels, str):
        out["labels"] = json.loads(labels)
    return out


def build_admin_nodes_router(state: FrontendState) -> APIRouter:
    router = APIRouter(prefix="/api/nodes")

    @router.get("")
    async def list_nodes() -> Any:
        return [node_view(r) for r in await node_store.listing(state.pool)]

    @router.get("/models")
    async def loaded_models() -> Any:
        rows = await state.pool.fetch(
            "SELECT m.* FROM node_models m JOIN backend_nodes n ON n.id = m.node_id "
            "WHERE m.state = 'loaded' AND n.status = 'healthy' ORDER BY m.model_name, m.node_id"
        )
        return [jsonable(r) for r in rows]

    @router.get("/labels")
    async def label_catalog() -> Any:
        """Every label key the cluster reports and its values: what a node selector can match."""
        return {"labels": await label_store.catalog(state.pool, LABEL_KEYS_MAX, LABEL_VALUES_MAX)}

    @router.get("/{node_id:uuid}")
    async def get_node(node_id: uuid.UUID) -> Any:
        rows = await node_store.listing(state.pool, str(node_id))
        return node_view(rows[0]) if rows else node_error(404, f"node {node_id} not found")

    @router.get("/{node_id:uuid}/models")
    async def node_models(node_id: uuid.UUID) -> Any:
        if await node_store.get(state.pool, str(node_id)) is None:
            return node_error(404, f"node {node_id} not found")
        return [jsonable(r) for r in await replica_store.of_node(state.pool, str(node_id))]

    _add_state_routes(router, state)
    return router


def _add_state_routes(router: APIRouter, state: FrontendState) -> None:
    @router.delete("/{node_id:uuid}")
    async def delete_node(node_id: uuid.UUID) -> Any:
        if not await node_store.delete(state.pool, str(node_id)):
            return node_error(404, f"node {node_id} not found")
        log.info("node %s deleted by an admin", node_id)
        await node_changed(state, str(node_id), "deleted")
        return {"message": "node deregistered"}

    _add_drain_routes(router, state)

    @router.post("/{node_id:uuid}/approve")
    async def approve(node_id: uuid.UUID) -> Any:
        row = await node_store.approve(state.pool, str(node_id))
        if row is None:
            if await node_store.get(state.pool, str(node_id)) is None:
                return node_error(404, f"node {node_id} not found")
            return node_error(400, f"node {node_id} is not pending approval")
        log.info("node %s (%s) approved", row["name"], row["id"])
        await node_changed(state, row["id"], row["status"])
        reply = {
            "id": row["id"],
            "name": row["name"],
            "node_type": row["node_type"],
            "status": row["status"],
            "message": "node approved",
        }
        if state.lifecycle is not None and state.lifecycle.minter is not None:
            reply.update(state.lifecycle.minter.credentials(row))
        reply.update(await agent_api_token(state, row))
        return reply


def _add_drain_routes(router: APIRouter, state: FrontendState) -> None:
    @router.post("/{node_id:uuid}/drain")
    async def drain(node_id: uuid.UUID) -> Any:
        """An admin's drain holds across the worker's re-registrations and resume calls."""
        if not await node_store.drain(state.pool, str(node_id), by=node_store.ADMIN, drop_replicas=True):
            return node_error(404, f"node {node_id} not found")
        await node_changed(state, str(node_id), node_store.DRAINING)
        return {"message": "node set to draining"}

    @router.post("/{node_id:uuid}/rekey")
    async def rekey(node_id: uuid.UUID) -> Any:
        """Forget the node's credential: the next registration under its name is accepted and gets a new one."""
        row = await node_store.rekey(state.pool, str(node_id))
        if row is None:
            return node_error(404, f"node {node_id} not found")
        log.warning(
            "node %s (%s) re-keyed by an admin: its next registration gets a new credential",
            row["name"],
            row["id"],
        )
        await node_changed(state, row["id"], row["status"])  # every frontend drops its cached credential
        return {
            "message": f"node credential cleared: the next registration as {row['name']!r} receives a new one"
        }

    @router.post("/{node_id:uuid}/resume")
    async def resume(node_id: uuid.UUID) -> Any:
        node = await node_store.get(state.pool, str(node_id))
        if node is None:
            return node_error(404, f"node {node_id} not found")
        if not node["approved"]:
            return node_error(
                409, f"node {node_id} is pending approval; approve it with POST /api/nodes/{node_id}/approve"
            )
        if not await node_store.resume(state.pool, str(node_id), by_admin=True):
            return node_error(404, f"node {node_id} not found")
        await node_changed(state, str(node_id), node_store.HEALTHY)
        return {"message": "node resumed"}
