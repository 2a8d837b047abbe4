"""The Batch API: `POST /v1/batches`, `GET /v1/batches`, `GET /v1/batches/{id}`, `POST /v1/batches/{id}/cancel`.

A batch runs the request lines of an uploaded file (purpose `batch`, frontend/inference/files.py) against one
endpoint — /v1/chat/completions, /v1/completions or /v1/embeddings — within its completion window (OpenAI's only
one, "24h"). The routes only record and report: the batch runner of every frontend (frontend/batch_runner.py)
validates it, runs its lines at the lowest priority class and writes its output and error files. Only the API key
that created a batch sees it (another key, or none, gets 404); its lines run as that key's caller.
"""

from __future__ import annotations

import secrets
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response

from corral.frontend.errors import APIError, clip
from corral.frontend.inference.files import (
    ID_MAX,
    bad,
    expiry_seconds,
    file_not_found,
    json_response,
    known_id,
    page,
    refuse_unknown_query,
)
from corral.frontend.inference.responses import owner_of
from corral.frontend.inference.responses_request import METADATA_KEY_MAX, METADATA_MAX, METADATA_VALUE_MAX
from corral.frontend.json_body import json_body
from corral.frontend.state import FrontendState
from corral.store import batches as store
from corral.tenancy.caller import current

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
WINDOWS_S = {"24h": 24 * 3600.0}
FIELDS = ("input_file_id", "endpoint", "completion_window", "metadata", "output_expires_after")
LIST_MAX, LIST_DEFAULT = 100, 20
STAMPS = (
    "created_at",
    "in_progress_at",
    "expires_at",
    "finalizing_at",
    "completed_at",
    "failed_at",
    "expired_at",
    "cancelling_at",
    "cancelled_at",
)


BatchId = Annotated[str, Path(max_length=ID_MAX)]


def batch_object(row: Any) -> dict[str, Any]:
    """OpenAI's batch object of a `batches` row."""
    tokens_in, tokens_out = row["input_tokens"], row["output_tokens"]
    return {
        "id": row["id"],
        "object": "batch",
        "endpoint": row["endpoint"],
        "errors": None if row["errors"] is None else orjson.loads(row["errors"]),
        "input_file_id": row["input_file_id"],
        "completion_window": row["completion_window"],
        "status": row["status"],
        "output_file_id": row["output_file_id"],
        "error_file_id": row["error_file_id"],
        **{stamp: row[stamp] for stamp in STAMPS},
        "request_counts": {"total": row["total"], "completed": row["completed"], "failed": row["failed"]},
        "metadata": None if row["metadata"] is None else orjson.loads(row["metadata"]),
        "model": row["model"],
        "usage": {
            "input_tokens": tokens_in,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": tokens_out,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": tokens_in + tokens_out,
        },
    }


def _not_found(batch_id: str) -> APIError:
    return bad(
        "batch_id",
        f"no such batch {clip(batch_id)!r}: unknown, or created with another API key",
        "not_found",
        404,
    )


def _string(data: dict[str, Any], name: str) -> str:
    value = data.get(name)
    if value is None:
        raise bad(name, f"field {name!r} is required", "missing_required_parameter")
    if not isinstance(value, str):
        raise bad(name, f"field {name!r} must be a string")
    return value


def _metadata(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise bad("metadata", "field 'metadata' must be an object of string values")
    if len(value) > METADATA_MAX:
        raise bad("metadata", f"field 'metadata' has {len(value)} keys; at most {METADATA_MAX} are taken")
    for key, text in value.items():
        if len(key) > METADATA_KEY_MAX or len(text) > METADATA_VALUE_MAX:
            raise bad(
                "metadata",
                f"metadata keys may have at most {METADATA_KEY_MAX} characters and values "
                f"{METADATA_VALUE_MAX} ({clip(key)!r} has more)",
            )
    return orjson.dumps(value).decode()


def _output_expiry(value: Any) -> int | None:
    """`output_expires_after`: seconds the batch's output and error files are kept once written (None: until
    deleted)."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - {"anchor", "seconds"}:
        raise bad(
            "output_expires_after",
            'field \'output_expires_after\' must be an object {"anchor": "created_at", "seconds": N}',
        )
    return expiry_seconds(value.get("anchor"), value.get("seconds"), "output_expires_after")


async def _create_fields(request: Request) -> tuple[str, str, str, str | None, int | None]:
    """(input_file_id, endpoint, completion_window, metadata JSON, output expiry seconds) of a create request;
    400 naming the field."""
    try:
        data = await json_body(request)
    except ValueError:
        raise bad("body", "request body is not valid JSON; send a JSON object") from None
    if not isinstance(data, dict):
        raise bad("body", "request body must be a JSON object")
    for name in data:
        if name not in FIELDS:
            raise bad(
                clip(name),
                f"unknown field {clip(name)!r}; a batch takes {', '.join(FIELDS)}",
                "unknown_parameter",
            )
    file_id, endpoint, window = (_string(data, name) for name in FIELDS[:3])
    if endpoint not in ENDPOINTS:
        raise bad(
            "endpoint",
            f"endpoint {clip(endpoint)!r} is not supported by corral for batches; use one of {', '.join(ENDPOINTS)}",
            "unsupported_value",
        )
    if window not in WINDOWS_S:
        raise bad(
            "completion_window",
            f"completion_window {clip(window)!r} is not supported; use {', '.join(map(repr, WINDOWS_S))}",
            "unsupported_value",
        )
    return (
        file_id,
        endpoint,
        window,
        _metadata(data.get("metadata")),
        _output_expiry(data.get("output_expires_after")),
    )


def build_batches_router(state: FrontendState) -> APIRouter:
    router = APIRouter(prefix="/v1")
    pool = state.pool

    async def owned(batch_id: str, owner: str) -> Any:
        row = await store.batch_row(pool, batch_id, owner) if known_id(batch_id) else None
        if row is None:
            raise _not_found(batch_id)
        return row

    @router.post("/batches")
    async def create(request: Request) -> Response:
        refuse_unknown_query(request, ())
        file_id, endpoint, window, metadata, output_expires_s = await _create_fields(request)
        owner = owner_of(request)
        source = await store.file_row(pool, file_id, owner) if known_id(file_id) else None
        if source is None:
            raise file_not_found(file_id, "input_file_id")
        if source["purpose"] != "batch":
            raise bad(
                "input_file_id",
                f"file {file_id!r} has purpose {source['purpose']!r}; a batch reads a file of purpose 'batch'",
            )
        batch_id, caller = f"batch_{secrets.token_hex(12)}", current()
        await store.insert_batch(
            pool,
            batch_id,
            owner,
            (caller.tenant, caller.key_id),
            (endpoint, file_id, window),
            WINDOWS_S[window],
            metadata,
            output_expires_s,
        )
        return json_response(batch_object(await owned(batch_id, owner)))

    @router.get("/batches")
    async def list_batches(
        request: Request,
        limit: Annotated[int, Query(ge=1, le=LIST_MAX)] = LIST_DEFAULT,
        after: Annotated[str | None, Query(max_length=ID_MAX)] = None,
    ) -> Response:
        refuse_unknown_query(request, ("limit", "after"))
        if after is not None and not known_id(after):
            raise _not_found(after)
        rows = await store.batches(pool, owner_of(request), after, limit + 1)
        return json_response(page([batch_object(row) for row in rows], limit))

    @router.get("/batches/{batch_id}")
    async def retrieve(batch_id: BatchId, request: Request) -> Response:
        return json_response(batch_object(await owned(batch_id, owner_of(request))))

    @router.post("/batches/{batch_id}/cancel")
    async def cancel(batch_id: BatchId, request: Request) -> Response:
        owner = owner_of(request)
        if known_id(batch_id):
            await store.cancel(pool, batch_id, owner)
        row = await owned(batch_id, owner)
        if row["status"] not in ("cancelling", "cancelled"):
            raise bad(
                "batch_id",
                f"batch {batch_id!r} is {row['status']}: only a validating or in-progress batch can be cancelled",
                "batch_not_cancellable",
                409,
            )
        return json_response(batch_object(row))

    return router
