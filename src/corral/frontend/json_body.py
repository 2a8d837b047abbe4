"""Read a request body as JSON for the routes that parse it by hand (admin APIs).

orjson, not `Request.json()`: it refuses nesting deeper than 1024 levels with a JSONDecodeError,
where the standard library raises RecursionError (a 500) on a body of `[[[[…`; and it is the
parser the inference fast path uses, so both halves of the API accept the same documents.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request


async def json_body(request: Request) -> Any:
    """The parsed body; raises ValueError (orjson.JSONDecodeError) when it is not one JSON document."""
    return orjson.loads(await request.body())


def documented_body(schema: dict[str, Any], media_type: str = "application/json") -> dict[str, Any]:
    """`openapi_extra` for a route that reads its body by hand: the schema shows in /openapi.json
    (for clients, and for the schema-driven fuzz test that drives every route)."""
    return {"requestBody": {"required": True, "content": {media_type: {"schema": schema}}}}
