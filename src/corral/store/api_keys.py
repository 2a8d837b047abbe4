"""API keys (`api_keys`): only the sha256 of a key is stored; the key itself is shown once, at creation."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from typing import Any

import asyncpg

from corral.store.queries import q

ADMIN, USER = "admin", "user"
ROLES = (ADMIN, USER)
KEY_PREFIX = "corral-"


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_hash(key: str) -> str:
    """Keys are 256-bit random strings, so one sha256 is enough (no password stretching needed)."""
    return hashlib.sha256(key.encode()).hexdigest()


def display_prefix(key: str) -> str:
    """What the listing shows so an operator can tell keys apart: never enough to use the key."""
    return key[: len(KEY_PREFIX) + 4]


async def insert(pool: asyncpg.Pool, key: str, *, name: str, role: str) -> asyncpg.Record | None:
    """Store a key's hash; None when that hash is already stored (a bootstrap key seen before)."""
    return await pool.fetchrow(
        q("api_key_insert"), str(uuid.uuid4()), name, role, key_hash(key), display_prefix(key)
    )


POLICY_COLUMNS = ("tenant", "models", "rpm", "tpm", "tokens_per_day", "tokens_per_month", "priority")


async def insert_with_policy(
    pool: asyncpg.Pool, key: str, *, name: str, role: str, policy: dict[str, Any]
) -> asyncpg.Record | None:
    """Store a key's hash with its policy (`POLICY_COLUMNS`, each present); None when that hash is stored."""
    return await pool.fetchrow(
        q("api_key_insert_with_policy"),
        str(uuid.uuid4()),
        name,
        role,
        key_hash(key),
        display_prefix(key),
        *(policy[c] for c in POLICY_COLUMNS),
    )


async def access_of(pool: asyncpg.Pool, hashed: str) -> asyncpg.Record | None:
    """A live key's id, name, role and policy columns; None when unknown or revoked."""
    return await pool.fetchrow(q("api_key_access"), hashed)


async def access_by_id(pool: asyncpg.Pool, key_id: str) -> asyncpg.Record | None:
    """The same as `access_of` by the key's id (work run later on the key's behalf); None when unknown or revoked."""
    return await pool.fetchrow(q("api_key_access_by_id"), key_id)


async def update_policy(pool: asyncpg.Pool, key_id: str, changes: dict[str, Any]) -> asyncpg.Record | None:
    """Change the given policy columns of a live key; the row with its `key_hash` (for the caches), or None
    when the key is unknown or revoked."""
    return await pool.fetchrow(q("api_key_policy_update"), key_id, *(changes.get(c) for c in POLICY_COLUMNS))


async def listing(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    return list(await pool.fetch(q("api_keys_list")))


async def revoke(pool: asyncpg.Pool, key_id: str) -> str | None:
    """Revoke a key; returns its hash (to evict it from caches) or None when unknown or already revoked."""
    hashed: str | None = await pool.fetchval(q("api_key_revoke"), key_id)
    return hashed


async def live_admin_count(pool: asyncpg.Pool) -> int:
    return int(await pool.fetchval(q("api_keys_live_admin_count")))


async def provision_node_key(pool: asyncpg.Pool, node_id: str, node_name: str) -> str:
    """A fresh user key for an agent node, replacing (revoking) the one it held: returned once, stored hashed."""
    key = new_key()
    async with pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(
            q("api_key_insert"),
            str(uuid.uuid4()),
            f"agent node {node_name}",
            USER,
            key_hash(key),
            display_prefix(key),
        )
        old = await conn.fetchval(q("node_api_key_swap"), node_id, row["id"])
        if old:
            await conn.fetchval(q("api_key_revoke"), old)
    return key
