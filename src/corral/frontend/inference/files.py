"""The Files API: `POST /v1/files` (multipart: `file`, `purpose`), `GET /v1/files`, `GET /v1/files/{id}`,
`GET /v1/files/{id}/content`, `DELETE /v1/files/{id}` — the input and output files of the Batch API.

Where the bytes live: in PostgreSQL, in chunks of 1 MiB (`batch_file_chunks`), not on a frontend's disk. Any
frontend then serves any file and runs any batch, a file survives the frontend that took it, and there is no
shared directory to configure or to keep from being escaped: ids are made here (`file-` and 24 random hex
digits), the client's filename is metadata only (its last path part, control characters removed, at most
NAME_MAX characters). The cost is PostgreSQL storage for files of at most CORRAL_FILES_MAX_BYTES, written once
and read a chunk at a time — no statement on the inference path.

An upload is never held in memory: Starlette spools the multipart file part to a temporary file past 1 MiB, and
it is copied into PostgreSQL a chunk at a time, in one transaction (a failed upload leaves nothing). Its size is
bounded twice: the body limit (frontend/limits.py: `/v1/files` has its own class, raised by the same setting)
refuses a declared length past it unread, and the copy stops at CORRAL_FILES_MAX_BYTES. Only the API key that
uploaded a file sees it (another key, or none, gets 404), as stored responses. A file is kept until deleted,
or until `expires_after` (anchor `created_at`, an hour to 30 days) when given: an expired file is answered as a
deleted one at once, and the batch runner deletes its rows soon after.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import AsyncIterator
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response, StreamingResponse
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException

from corral.frontend.bounds import NAME_MAX
from corral.frontend.errors import APIError, clip
from corral.frontend.inference.responses import owner_of
from corral.frontend.state import FrontendState
from corral.store import batches as store

SIZE_KNOB = "CORRAL_FILES_MAX_BYTES"
PURPOSES_SUPPORTED = ("batch",)
PURPOSES_OPENAI = ("assistants", "vision", "fine-tune", "user_data", "evals")  # refused by name
ID_MAX = 64
_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
LIST_MAX = 10_000  # files in one list page, as OpenAI
EXPIRY_FIELDS = ("expires_after[anchor]", "expires_after[seconds]")
FORM_FIELDS = ("file", "purpose", *EXPIRY_FIELDS)
EXPIRES_MIN_S, EXPIRES_MAX_S = 3600, 30 * 86400  # OpenAI's bounds: an hour to 30 days
EXPIRY_ANCHOR = "created_at"


FileId = Annotated[str, Path(max_length=ID_MAX)]


def bad(param: str, message: str, code: str = "invalid_value", status: int = 400) -> APIError:
    return APIError(status, message, "invalid_request_error", code, param)


def new_file_id() -> str:
    return f"file-{secrets.token_hex(12)}"


def known_id(value: str) -> bool:
    """Whether `value` can name a stored object (ours are a prefix and hex); any other is answered without a
    lookup (PostgreSQL refuses a NUL, for one)."""
    return _ID.fullmatch(value) is not None


def clean_filename(raw: str | None) -> str:
    """The client's filename as metadata: its last path part, printable characters only, at most NAME_MAX."""
    name = (raw or "").replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(ch for ch in name if ch.isprintable()).strip()
    name = name.encode("utf-8", "replace").decode("utf-8")[:NAME_MAX]
    return name if name not in ("", ".", "..") else "upload"


def file_object(row: Any) -> dict[str, Any]:
    return {
        "id": row["id"],
        "object": "file",
        "bytes": row["bytes"],
        "created_at": row["created_at"],
        "filename": row["filename"],
        "purpose": row["purpose"],
        "status": "processed",
        "expires_at": row["expires_at"],
        "status_details": None,
    }


def json_response(body: dict[str, Any], status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def page(objects: list[dict[str, Any]], limit: int) -> dict[str, Any]:
    """OpenAI's cursor page of `objects` (fetched one past `limit` to know whether there are more)."""
    data = objects[:limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(objects) > limit,
    }


def refuse_unknown_query(request: Request, known: tuple[str, ...]) -> None:
    for name in request.query_params:
        if name not in known:
            raise bad(
                clip(name),
                f"unknown query parameter {clip(name)!r}; this route takes {', '.join(known)}",
                "unknown_parameter",
            )


def file_not_found(file_id: str, param: str = "file_id") -> APIError:
    return bad(
        param,
        f"no such file {clip(file_id)!r}: unknown, deleted, or uploaded with another API key",
        "not_found",
        404,
    )


def _purpose(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise bad("purpose", "field 'purpose' is required: send purpose=batch", "missing_required_parameter")
    if value in PURPOSES_SUPPORTED:
        return value
    if value in PURPOSES_OPENAI:
        raise bad(
            "purpose",
            f"purpose {value!r} is not supported by corral: only 'batch' (input files of /v1/batches)",
            "unsupported_value",
        )
    raise bad("purpose", f"unknown purpose {clip(value)!r}; send purpose=batch", "invalid_value")


async def _form(request: Request) -> tuple[UploadFile, str, Any]:
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise bad(
            "file", "send multipart/form-data with the fields 'file' and 'purpose'", "invalid_content_type"
        )
    try:
        form = await request.form(max_files=1, max_fields=len(FORM_FIELDS))
    except MultiPartException as exc:
        raise bad("file", f"the multipart body could not be read: {exc}") from None
    for name in form:
        if name not in FORM_FIELDS:
            await form.close()
            raise bad(
                clip(name),
                f"unknown field {clip(name)!r}; send 'file', 'purpose' and optionally "
                "'expires_after[anchor]' with 'expires_after[seconds]'",
                "unknown_parameter",
            )
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        await form.close()
        raise bad(
            "file",
            "field 'file' is required: send the file as a multipart file part",
            "missing_required_parameter",
        )
    try:
        return upload, _purpose(form.get("purpose")), form
    except APIError:
        await form.close()
        raise


def expiry_seconds(anchor: Any, seconds: Any, param: str) -> int | None:
    """`expires_after` ({anchor, seconds}, as OpenAI): how long a file is kept after it is written; None when
    neither part is given. `param` names the field in errors (`expires_after` or `output_expires_after`)."""
    if anchor is None and seconds is None:
        return None
    if anchor != EXPIRY_ANCHOR:
        raise bad(f"{param}.anchor", f"{param}.anchor must be {EXPIRY_ANCHOR!r} (got {clip(str(anchor))!r})")
    if isinstance(seconds, str) and seconds.strip().isdigit() and len(seconds) <= 12:
        seconds = int(seconds)  # a form field is text
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int)
        or not EXPIRES_MIN_S <= seconds <= EXPIRES_MAX_S
    ):
        raise bad(
            f"{param}.seconds",
            f"{param}.seconds must be a whole number of seconds between {EXPIRES_MIN_S} (an hour) and "
            f"{EXPIRES_MAX_S} (30 days); got {clip(str(seconds))!r}",
        )
    return seconds


async def _bounded(upload: UploadFile, max_bytes: int) -> AsyncIterator[bytes]:
    total = 0
    while chunk := await upload.read(store.CHUNK_BYTES):
        total += len(chunk)
        if total > max_bytes:
            raise bad(
                "file",
                f"file too large: at most {max_bytes} bytes are taken; raise {SIZE_KNOB} to allow more",
                "file_too_large",
                413,
            )
        yield chunk


def build_files_router(state: FrontendState) -> APIRouter:
    router = APIRouter(prefix="/v1")
    pool = state.pool

    async def owned(file_id: str, owner: str) -> Any:
        row = await store.file_row(pool, file_id, owner) if known_id(file_id) else None
        if row is None:
            raise file_not_found(file_id)
        return row

    @router.post("/files")
    async def upload(request: Request) -> Response:
        refuse_unknown_query(request, ())
        upload, purpose, form = await _form(request)
        file_id, owner = new_file_id(), owner_of(request)
        try:
            anchor, seconds = (form.get(name) for name in EXPIRY_FIELDS)
            expires_s = expiry_seconds(anchor, seconds, "expires_after")
            async with pool.acquire() as conn, conn.transaction():
                await store.insert_file(
                    conn,
                    file_id,
                    owner,
                    clean_filename(upload.filename),
                    purpose,
                    _bounded(upload, state.files_max_bytes),
                    expires_s,
                )
        finally:
            await form.close()
        return json_response(file_object(await owned(file_id, owner)))

    @router.get("/files")
    async def list_files(
        request: Request,
        purpose: Annotated[str | None, Query(pattern="^[a-z_-]{1,32}$")] = None,
        limit: Annotated[int, Query(ge=1, le=LIST_MAX)] = LIST_MAX,
        after: Annotated[str | None, Query(max_length=ID_MAX)] = None,
        order: Annotated[str, Query(pattern="^(asc|desc)$")] = "desc",
    ) -> Response:
        refuse_unknown_query(request, ("purpose", "limit", "after", "order"))
        if after is not None and not known_id(after):
            raise file_not_found(after, "after")
        rows = await store.files(pool, owner_of(request), purpose, after, limit + 1, ascending=order == "asc")
        return json_response(page([file_object(row) for row in rows], limit))

    @router.get("/files/{file_id}")
    async def retrieve(file_id: FileId, request: Request) -> Response:
        return json_response(file_object(await owned(file_id, owner_of(request))))

    @router.get("/files/{file_id}/content")
    async def content(file_id: FileId, request: Request) -> Response:
        row = await owned(file_id, owner_of(request))
        return StreamingResponse(
            store.file_chunks(pool, row["id"]),
            media_type="application/octet-stream",
            headers={"content-length": str(row["bytes"])},
        )

    @router.delete("/files/{file_id}")
    async def delete(file_id: FileId, request: Request) -> Response:
        if not known_id(file_id) or not await store.delete_file(pool, file_id, owner_of(request)):
            raise file_not_found(file_id)
        return json_response({"id": file_id, "object": "file", "deleted": True})

    return router
