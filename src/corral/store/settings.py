"""Runtime settings in PostgreSQL, so every frontend sees a change on its next decision."""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from corral.store.queries import q


async def get(pool: asyncpg.Pool, key: str, default: Any) -> Any:
    row = await pool.fetchrow(q("setting_get"), key)
    return default if row is None else json.loads(row["value"])


async def put(pool: asyncpg.Pool, key: str, value: Any) -> None:
    await pool.execute(q("setting_put"), key, json.dumps(value))


async def all_settings(pool: asyncpg.Pool) -> dict[str, Any]:
    return {r["key"]: json.loads(r["value"]) for r in await pool.fetch(q("settings_all"))}
