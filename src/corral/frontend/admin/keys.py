"""`/api/keys`: create (the key is shown once), list (hash never shown) and revoke API keys. Admin-only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, field_validator

from corral.frontend.bounds import NAME_MAX, NODE_ID_MAX
from corral.frontend.node_api.identity import node_error
from corral.frontend.node_api.routes import jsonable
from corral.frontend.state import FrontendState
from corral.nodes.events import publish_key_revoked
from corral.store import api_keys


class CreateKeyRequest(BaseModel):
    name: str = Field(default="", max_length=NAME_MAX)  # api_keys.name varchar(255)
    role: Literal["admin", "user"] = "user"

    @field_validator("name")
    @classmethod
    def _storable(cls, value: str) -> str:
        if "\x00" in value:  # PostgreSQL text holds no NUL character
            raise ValueError("must not contain the NUL character (\\u0000)")
        return value


def build_keys_router(state: FrontendState, on_revoked: Callable[[str], None] | None = None) -> APIRouter:
    router = APIRouter(prefix="/api/keys")

    @router.get("")
    async def list_keys() -> Any:
        return [jsonable(r) for r in await api_keys.listing(state.pool)]

    @router.post("", status_code=201)
    async def create_key(body: CreateKeyRequest) -> Any:
        key = api_keys.new_key()
        row = await api_keys.insert(state.pool, key, name=body.name, role=body.role)
        if row is None:  # a 256-bit collision: not going to happen, but never hand out an unstored key
            return node_error(500, "could not store the new key; try again")
        return JSONResponse({**jsonable(row), "key": key}, status_code=201)

    @router.delete("/{key_id}")
    async def revoke_key(key_id: Annotated[str, Path(max_length=NODE_ID_MAX)]) -> Any:
        hashed = await api_keys.revoke(state.pool, key_id)
        if hashed is None:
            return node_error(404, f"API key {key_id} not found or already revoked")
        if on_revoked is not None:
            on_revoked(hashed)
        await publish_key_revoked(state.nc, hashed)
        return {"message": "key revoked", "id": key_id}

    return router
