"""Shared pieces of the admin per-node operation routes: the node-id path parameter, body fields
checked by hand (a 400 names the field and the fix), the node lookup, and NATS errors → HTTP."""

from __future__ import annotations

import json
from typing import Annotated, Any

import asyncpg
from fastapi import Path, Request
from fastapi.responses import JSONResponse

from corral.bus import client as bus
from corral.frontend.bounds import NODE_ID_MAX
from corral.frontend.json_body import json_body
from corral.frontend.node_api.identity import node_error
from corral.models.names import backend_name_problem, name_problem
from corral.store import nodes as node_store

NodeId = Annotated[str, Path(max_length=NODE_ID_MAX)]
URI_MAX = 2048
GALLERIES_MAX = 32
GALLERY_TEXT_MAX = 64 * 1024


class BadRequest(Exception):
    """A body field is wrong: the message names it and what is accepted."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"invalid request: field '{field}' {message}")
        self.field = field

    def response(self) -> JSONResponse:
        return JSONResponse(
            {
                "error": {
                    "code": 400,
                    "message": str(self),
                    "type": "invalid_request_error",
                    "param": self.field,
                }
            },
            status_code=400,
        )


async def object_body(request: Request) -> dict[str, Any]:
    try:
        body = await json_body(request)
    except ValueError:
        raise BadRequest("body", "must be one JSON object") from None
    if not isinstance(body, dict):
        raise BadRequest("body", "must be a JSON object") from None
    return body


def name_field(body: dict[str, Any], field: str, *, required: bool = True, backend: bool = True) -> str:
    """A backend name (a directory name: `models.names`) or, with `backend=False`, a model name; never a
    path (no '/', no '..')."""
    value = body.get(field)
    if value is None or value == "":
        if required:
            raise BadRequest(
                field, "is required (a backend name)" if backend else "is required (a model name)"
            )
        return ""
    if (problem := (backend_name_problem if backend else name_problem)(value)) is not None:
        raise BadRequest(field, problem)
    return str(value)


def text_field(body: dict[str, Any], field: str, max_chars: int) -> str:
    value = body.get(field)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadRequest(field, "must be a string")
    if len(value) > max_chars:
        raise BadRequest(field, f"must be at most {max_chars} characters, got {len(value)}")
    return value


def galleries_field(body: dict[str, Any]) -> str | None:
    """`backend_galleries`: a list of {"name", "url"} (or that list as a JSON string, as on the wire)."""
    value = body.get("backend_galleries")
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, str):
        if len(value) > GALLERY_TEXT_MAX:
            raise BadRequest("backend_galleries", f"must be at most {GALLERY_TEXT_MAX} characters")
        try:
            value = json.loads(value)
        except ValueError:
            raise BadRequest("backend_galleries", 'must be a list of {"name", "url"} objects') from None
    if not isinstance(value, list) or len(value) > GALLERIES_MAX:
        raise BadRequest(
            "backend_galleries", f'must be a list of at most {GALLERIES_MAX} {{"name", "url"}} objects'
        )
    galleries = []
    for index, entry in enumerate(value):
        if not isinstance(entry, dict) or not isinstance(entry.get("url"), str) or not entry["url"]:
            raise BadRequest(f"backend_galleries[{index}]", "must be an object with a non-empty string 'url'")
        name = entry.get("name", "")
        if not isinstance(name, str) or len(name) > 255 or len(entry["url"]) > URI_MAX:
            raise BadRequest(
                f"backend_galleries[{index}]",
                f"'name' must be a string of at most 255 characters and 'url' at most {URI_MAX}",
            )
        galleries.append({"name": name, "url": entry["url"]})
    return json.dumps(galleries)


async def backend_node(pool: asyncpg.Pool, node_id: str) -> asyncpg.Record | JSONResponse:
    """The node row, or the 404 answer naming the id."""
    node = await node_store.get(pool, node_id)
    return node if node is not None else node_error(404, f"node {node_id} not found")


def bus_failure(exc: bus.BusError) -> JSONResponse:
    """504 when the worker got the call but did not answer in time (the message names the knob);
    502 when no worker listens (offline) or the call failed on the way."""
    status = 504 if isinstance(exc, bus.RequestTimeout) else 502
    return node_error(status, str(exc))
