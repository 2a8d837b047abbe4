"""`/api/nodes/<id>/labels` (GET, PUT replace, PATCH merge, DELETE one key) and the sticky
`/api/nodes/<id>/max-replicas-per-model` override. Admin-only (see `access`)."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import Response
from pydantic import BaseModel

from corral.frontend.bounds import LABEL_KEY_MAX, LABEL_VALUE_MAX, LABELS_MAX, ReplicasOverride
from corral.frontend.json_body import documented_body, json_body
from corral.frontend.node_api.identity import node_error
from corral.frontend.state import FrontendState
from corral.store import labels as label_store
from corral.store import nodes as node_store

LABELS_BODY = documented_body(
    {
        "type": "object",
        "maxProperties": LABELS_MAX,
        "propertyNames": {"minLength": 1, "maxLength": LABEL_KEY_MAX},
        "additionalProperties": {"type": "string", "maxLength": LABEL_VALUE_MAX},
    }
)


class MaxReplicasBody(BaseModel):
    value: ReplicasOverride


async def _label_body(request: Request) -> dict[str, str] | Response:
    try:
        body = await json_body(request)
    except ValueError:
        return node_error(400, "request body is not valid JSON; send an object of label key → value")
    if not isinstance(body, dict):
        return node_error(400, "labels must be a JSON object of label key → value")
    if len(body) > LABELS_MAX:
        return node_error(400, f"send at most {LABELS_MAX} labels in one request, got {len(body)}")
    for key, value in body.items():
        if not key or len(key) > LABEL_KEY_MAX:
            return node_error(400, f"label key {key[:40]!r} must be 1-{LABEL_KEY_MAX} characters")
        if not isinstance(value, str) or len(value) > LABEL_VALUE_MAX:
            return node_error(
                400, f"label {key!r}: value must be a string of at most {LABEL_VALUE_MAX} characters"
            )
        if "\x00" in key or "\x00" in value:  # PostgreSQL text holds no NUL character
            return node_error(
                400, f"label {key[:40]!r}: keys and values must not contain the NUL character (\\u0000)"
            )
    return body


async def _missing(state: FrontendState, node_id: uuid.UUID) -> Response | None:
    if await node_store.get(state.pool, str(node_id)) is None:
        return node_error(404, f"node {node_id} not found")
    return None


def _label_routes_replace(router: APIRouter, state: FrontendState) -> None:
    @router.put("/labels", openapi_extra=LABELS_BODY)
    async def replace_labels(node_id: uuid.UUID, request: Request) -> Any:
        body = await _label_body(request)
        if isinstance(body, Response):
            return body
        if (refusal := await _missing(state, node_id)) is not None:
            return refusal
        await label_store.replace(state.pool, str(node_id), body)
        return body


def build_admin_labels_router(state: FrontendState) -> APIRouter:
    router = APIRouter(prefix="/api/nodes/{node_id:uuid}")

    async def missing(node_id: uuid.UUID) -> Response | None:
        return await _missing(state, node_id)

    @router.get("/labels")
    async def get_labels(node_id: uuid.UUID) -> Any:
        return await missing(node_id) or await label_store.of_node(state.pool, str(node_id))

    _label_routes_replace(router, state)

    @router.patch("/labels", openapi_extra=LABELS_BODY)
    async def merge_labels(node_id: uuid.UUID, request: Request) -> Any:
        body = await _label_body(request)
        if isinstance(body, Response):
            return body
        if (refusal := await missing(node_id)) is not None:
            return refusal
        await label_store.merge(state.pool, str(node_id), body)
        return await label_store.of_node(state.pool, str(node_id))

    @router.delete("/labels/{key}", response_class=Response)
    async def delete_label(node_id: uuid.UUID, key: Annotated[str, Path(max_length=LABEL_KEY_MAX)]) -> Any:
        if (refusal := await missing(node_id)) is not None:
            return refusal
        await label_store.delete(state.pool, str(node_id), key)
        return Response(status_code=204)

    _add_max_replicas_routes(router, state)
    return router


def _add_max_replicas_routes(router: APIRouter, state: FrontendState) -> None:
    @router.put("/max-replicas-per-model")
    async def set_max_replicas(node_id: uuid.UUID, body: MaxReplicasBody) -> Any:
        if not await node_store.set_max_replicas(state.pool, str(node_id), body.value):
            return node_error(404, f"node {node_id} not found")
        return {"max_replicas_per_model": body.value}

    @router.delete("/max-replicas-per-model")
    async def reset_max_replicas(node_id: uuid.UUID) -> Any:
        if not await node_store.reset_max_replicas(state.pool, str(node_id)):
            return node_error(404, f"node {node_id} not found")
        return {"reset": True}
