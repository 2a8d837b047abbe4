"""Read a request body as JSON for the routes that parse it by hand (admin APIs).

orjson, not `Request.json()`: it refuses nesting deeper than 1024 levels with a JSONDecodeError,
where the standard library raises RecursionError (a 500) on a body of `[[[[…`; and it is the
parser the inference fast path uses, so both halves of the API accept the same documents.
orjson also refuses text that is not valid Unicode (a lone surrogate escape like `"\\ud800"`, or
bytes that are not UTF-8); such a body is refused with `InvalidText`, which names the field.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from starlette.requests import Request

from corral.models.text import invalid_text, text_problem


class InvalidText(ValueError):
    """A string of the JSON body is not valid Unicode text; the message names the field and the fix."""

    def __init__(self, field: str) -> None:
        super().__init__(text_problem(field))
        self.field = field


def invalid_text_field(raw: bytes) -> str | None:
    """Where a body orjson refused holds text that is not valid Unicode, found with the standard library
    (which decodes lone surrogates, and undecodable bytes kept as surrogates); None for any other fault."""
    try:
        return invalid_text(json.loads(raw.decode(errors="surrogateescape")))
    except (ValueError, RecursionError):
        return None


async def json_body(request: Request) -> Any:
    """The parsed body; raises ValueError (orjson.JSONDecodeError, or InvalidText naming the field) when it is
    not one JSON document of valid text."""
    raw = await request.body()
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        field = invalid_text_field(raw)
        if field is not None:
            raise InvalidText(field) from None
        raise


def documented_body(schema: dict[str, Any], media_type: str = "application/json") -> dict[str, Any]:
    """`openapi_extra` for a route that reads its body by hand: the schema shows in /openapi.json
    (for clients, and for the schema-driven fuzz test that drives every route)."""
    return {"requestBody": {"required": True, "content": {media_type: {"schema": schema}}}}
