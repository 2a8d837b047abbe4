"""Node labels (`node_labels`): read, replace, merge, delete one key."""

from __future__ import annotations

import uuid

import asyncpg

from corral.store.queries import q


async def of_node(pool: asyncpg.Pool, node_id: str) -> dict[str, str]:
    return {r["key"]: r["value"] for r in await pool.fetch(q("labels_of_node"), node_id)}


async def replace(pool: asyncpg.Pool, node_id: str, labels: dict[str, str]) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(q("labels_clear"), node_id)
        for key, value in labels.items():
            await conn.execute(q("label_upsert"), str(uuid.uuid4()), node_id, key, value)


async def merge(pool: asyncpg.Pool, node_id: str, labels: dict[str, str]) -> None:
    async with pool.acquire() as conn, conn.transaction():
        for key, value in labels.items():
            await conn.execute(q("label_upsert"), str(uuid.uuid4()), node_id, key, value)


async def delete(pool: asyncpg.Pool, node_id: str, key: str) -> bool:
    return await pool.fetchrow(q("label_delete"), node_id, key) is not None


async def catalog(pool: asyncpg.Pool, keys_max: int, values_max: int) -> dict[str, list[str]]:
    """Label key → its distinct values over every node (at most `keys_max` keys, `values_max` values each)."""
    rows = await pool.fetch(q("label_catalog"), keys_max, values_max)
    return {r["key"]: list(r["label_values"]) for r in rows}
