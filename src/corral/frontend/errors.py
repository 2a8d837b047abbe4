"""The OpenAI error envelope and the exception handlers that produce it."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

log = logging.getLogger(__name__)


class APIError(Exception):
    """An error answered to the client in the OpenAI envelope."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str,
        code: str | int | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.code, self.param = status, message, type_, code, param
        self.headers = headers or {}
        self.extra = extra or {}  # additive top-level fields, e.g. the `loading` object


def envelope(
    message: str, type_: str, code: str | int | None = None, param: str | None = None
) -> dict[str, Any]:
    error: dict[str, Any] = {"message": message, "type": type_, "code": code}
    if param is not None:
        error["param"] = param
    return {"error": error}


# OpenAI's codes for a refused request field (`request_fields` raises pydantic errors of these types)
UNKNOWN_PARAMETER, UNSUPPORTED_PARAMETER, UNSUPPORTED_VALUE = (
    "unknown_parameter",
    "unsupported_parameter",
    "unsupported_value",
)
FIELD_CODES = frozenset({UNKNOWN_PARAMETER, UNSUPPORTED_PARAMETER, UNSUPPORTED_VALUE})

LOCATIONS = ("body", "path", "query", "header", "cookie")  # where FastAPI found the field, not its name
UNION_TAGS = frozenset({"str", "int", "float", "bool", "none"})  # pydantic's names of a union's plain members


def _union_tag(part: Any) -> bool:
    """Whether a location part names the member of a union that was tried (`str`, `literal['a','b']`,
    `list[…]`), not a field: `messages.0.content.str` is the field `messages.0.content`."""
    return isinstance(part, str) and (part in UNION_TAGS or "[" in part[1:])  # not `[key]`: a dict's bad key


PART_MAX = (
    40  # a field path quotes at most this much of one part (a 10 kB label key stays out of the message)
)


def clip(part: Any) -> str:
    """A part of a field path as text, at most PART_MAX characters."""
    text = str(part)
    return text if len(text) <= PART_MAX else text[:PART_MAX] + "…"


def _field_path(loc: tuple[Any, ...]) -> tuple[str, str]:
    """(dotted field path, what inside it is wrong): a bad dict key is named as `key '…'` of its field.

    FastAPI prefixes the location (`("body", "query")`); the fast path validates the body itself and does
    not (`("query",)`: the rerank field named `query`), so a lone element is always the field."""
    parts = list(loc[1:] if len(loc) > 1 and loc[0] in LOCATIONS else loc)
    parts = parts[:1] + [p for p in parts[1:] if not _union_tag(p)]
    prefix = ""
    if len(parts) >= 2 and parts[-1] == "[key]":
        prefix = f"key {clip(parts[-2])!r}: "
        parts = parts[:-2]
    return ".".join(clip(p) for p in parts) or "body", prefix


def _first_error(exc: RequestValidationError | ValidationError) -> dict[str, Any]:
    errors = list(exc.errors())
    return dict(errors[0]) if errors else {"loc": ("body",), "msg": "invalid request"}


def validation_message(exc: RequestValidationError | ValidationError) -> tuple[str, str]:
    """(field, message); an error that names its field in its context (`request_fields`) is named so."""
    first = _first_error(exc)
    param = (first.get("ctx") or {}).get("param")
    field, prefix = (param, "") if isinstance(param, str) else _field_path(tuple(first.get("loc", ())))
    if first.get("type") == "json_invalid":
        return "body", "request body is not valid JSON; send a JSON object"
    msg = str(first.get("msg", "invalid value"))
    return field, f"invalid request: field '{field}': {prefix}{msg}"


def validation_response(exc: RequestValidationError | ValidationError) -> JSONResponse:
    field, message = validation_message(exc)
    kind = _first_error(exc).get("type")
    code = (
        kind if kind in FIELD_CODES else "invalid_value"
    )  # OpenAI's codes for refused fields, as clients branch on them
    return JSONResponse(envelope(message, "invalid_request_error", code, field), status_code=400)


def api_error_response(exc: APIError) -> JSONResponse:
    return JSONResponse(
        {**envelope(exc.message, exc.type, exc.code, exc.param), **exc.extra},
        status_code=exc.status,
        headers=exc.headers,
    )


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_request: Request, exc: APIError) -> JSONResponse:
        return api_error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        type_ = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return JSONResponse(envelope(str(exc.detail), type_, exc.status_code), status_code=exc.status_code)

    install_unavailable_handler(app)

    @app.exception_handler(ClientDisconnect)
    async def _gone(_request: Request, _exc: ClientDisconnect) -> Response:
        # The client left mid-body, or its body deadline closed the connection (CORRAL_HTTP_BODY_TIMEOUT, which
        # answered 408 itself): nobody reads this answer, and it is no bug to log.
        return Response(status_code=400)

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> Response:
        return dependency_or_unexpected_response(exc)  # middleware errors (e.g. a key lookup) land here


def unexpected_response(exc: BaseException) -> JSONResponse:
    """A bug reached the client: log the traceback here, answer only the exception's type name."""
    log.error("unexpected error", exc_info=exc)
    return JSONResponse(
        envelope(f"internal error: {type(exc).__name__}", "server_error", 500), status_code=500
    )


def dependency_or_unexpected_response(exc: BaseException) -> Response:
    """PostgreSQL or NATS down: 503 naming it and its setting (frontend/unavailable.py); else a 500."""
    from corral.frontend.unavailable import unavailable_response

    down = unavailable_response(exc)
    if down is not None:
        log.warning("%s", bytes(down.body).decode())
        return down
    return unexpected_response(exc)


def install_unavailable_handler(app: FastAPI) -> None:
    """Route handlers' dependency errors are answered here, inside the app (no traceback re-raised)."""
    from corral.frontend.unavailable import DEPENDENCY_ERRORS

    async def _unavailable(_request: Request, exc: Exception) -> Response:
        return dependency_or_unexpected_response(exc)

    for kind in DEPENDENCY_ERRORS:
        app.add_exception_handler(kind, _unavailable)
