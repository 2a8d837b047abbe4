"""`/api/keys`: create (the key is shown once), list (hash never shown), change the policy of, and revoke API keys.
Admin-only.

A key's policy (tenancy/policy.py): `tenant` (default: the key's name), `models` (names and globs; empty: all),
`rpm` and `tpm` (requests and tokens per minute), `tokens_per_day` and `tokens_per_month` (UTC), `priority`
(a class of tenancy/caller.py). 0 is unlimited. A change or a revocation drops the key from every frontend's key
cache at once (NATS `state.api-keys.revoked`): its next request reads the new policy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator

from corral.frontend.bounds import NAME_MAX, NODE_ID_MAX
from corral.frontend.node_api.identity import node_error
from corral.frontend.node_api.routes import jsonable
from corral.frontend.state import FrontendState
from corral.nodes.events import publish_key_revoked
from corral.store import api_keys
from corral.tenancy.caller import DEFAULT_PRIORITY
from corral.tenancy.policy import LIMIT_MAX, check_models, check_priority

Limit = Annotated[StrictInt, Field(ge=0, le=LIMIT_MAX)]  # bigint columns; 0 unlimited


def _storable(value: str) -> str:
    if "\x00" in value:  # PostgreSQL text holds no NUL character
        raise ValueError("must not contain the NUL character (\\u0000)")
    return value


class KeyPolicyChange(BaseModel):
    """The policy fields a PATCH may change (each absent one is kept); any other field is a 400 naming it."""

    model_config = ConfigDict(extra="forbid")

    tenant: str | None = Field(default=None, max_length=NAME_MAX)  # api_keys.tenant varchar(255)
    models: list[str] | None = None
    rpm: Limit | None = None
    tpm: Limit | None = None
    tokens_per_day: Limit | None = None
    tokens_per_month: Limit | None = None
    priority: str | None = None

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, value: str | None) -> str | None:
        return None if value is None else _storable(value)

    @field_validator("models")
    @classmethod
    def _models(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else list(check_models(value))

    @field_validator("priority")
    @classmethod
    def _priority(cls, value: str | None) -> str | None:
        return None if value is None else check_priority(value)

    def changes(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True, exclude_none=True)


class CreateKeyRequest(KeyPolicyChange):
    name: str = Field(default="", max_length=NAME_MAX)  # api_keys.name varchar(255)
    role: Literal["admin", "user"] = "user"

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _storable(value)

    def policy(self) -> dict[str, Any]:
        """Every policy column, the absent ones at their defaults (tenant: the key's name)."""
        return {
            "tenant": self.tenant or self.name,
            "models": self.models or [],
            "rpm": self.rpm or 0,
            "tpm": self.tpm or 0,
            "tokens_per_day": self.tokens_per_day or 0,
            "tokens_per_month": self.tokens_per_month or 0,
            "priority": self.priority or DEFAULT_PRIORITY,
        }


def build_keys_router(state: FrontendState, on_revoked: Callable[[str], None] | None = None) -> APIRouter:
    """`on_revoked`: this frontend's key cache eviction, told at once of a revocation or policy change (the
    others hear it over NATS)."""
    router = APIRouter(prefix="/api/keys")

    async def evict_everywhere(hashed: str) -> None:
        if on_revoked is not None:
            on_revoked(hashed)
        await publish_key_revoked(state.nc, hashed)

    @router.get("")
    async def list_keys() -> Any:
        return [jsonable(r) for r in await api_keys.listing(state.pool)]

    @router.post("", status_code=201)
    async def create_key(body: CreateKeyRequest) -> Any:
        key = api_keys.new_key()
        row = await api_keys.insert_with_policy(
            state.pool, key, name=body.name, role=body.role, policy=body.policy()
        )
        if row is None:  # a 256-bit collision: not going to happen, but never hand out an unstored key
            return node_error(500, "could not store the new key; try again")
        return JSONResponse({**jsonable(row), "key": key}, status_code=201)

    @router.patch("/{key_id}")
    async def change_policy(
        key_id: Annotated[str, Path(max_length=NODE_ID_MAX)], body: KeyPolicyChange
    ) -> Any:
        changes = body.changes()
        if not changes:
            fields = ", ".join(KeyPolicyChange.model_fields)
            return node_error(400, f"nothing to change: send one or more of {fields}")
        row = await api_keys.update_policy(state.pool, key_id, changes)
        if row is None:
            return node_error(404, f"API key {key_id} not found or revoked")
        await evict_everywhere(str(row["key_hash"]))
        return jsonable({k: v for k, v in dict(row).items() if k != "key_hash"})

    @router.delete("/{key_id}")
    async def revoke_key(key_id: Annotated[str, Path(max_length=NODE_ID_MAX)]) -> Any:
        hashed = await api_keys.revoke(state.pool, key_id)
        if hashed is None:
            return node_error(404, f"API key {key_id} not found or already revoked")
        await evict_everywhere(hashed)
        return {"message": "key revoked", "id": key_id}

    return router
