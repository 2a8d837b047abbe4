"""Model config revisions (`model_config_states`) and the durable exact-stop cleanup of old replicas."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg

from corral.store.queries import q


async def establish(pool: asyncpg.Pool, model: str, revision: str, yaml_text: str) -> None:
    await pool.execute(q("revision_establish"), model, revision, yaml_text)


async def get(pool: asyncpg.Pool, model: str) -> asyncpg.Record | None:
    return await pool.fetchrow(q("revision_get"), model)


async def all_states(pool: asyncpg.Pool) -> dict[str, asyncpg.Record]:
    return {r["model_name"]: r for r in await pool.fetch(q("revision_all"))}


async def all_seqs(pool: asyncpg.Pool) -> dict[str, int]:
    """Every model's commit number."""
    return {r["model_name"]: int(r["config_seq"]) for r in await pool.fetch(q("revision_seqs"))}


@asynccontextmanager
async def locked(
    pool: asyncpg.Pool, model: str
) -> AsyncIterator[tuple[asyncpg.Connection, asyncpg.Record | None]]:
    """A transaction holding `model`'s committed row (None when there is none) locked until it ends: edits to
    one model, on any frontend, serialise here. Write with `advance_on(conn, …)`; an exception rolls back."""
    async with pool.acquire() as conn, conn.transaction():
        yield conn, await conn.fetchrow(q("revision_lock"), model)


async def advance_on(
    conn: asyncpg.Connection, model: str, revision: str, yaml_text: str
) -> tuple[int, list[asyncpg.Record]]:
    """Inside a transaction: make `revision` current and quarantine every replica of another revision;
    returns (the row's commit number, the quarantined replica rows)."""
    seq = int(await conn.fetchval(q("revision_advance"), model, revision, yaml_text))
    rows = list(await conn.fetch(q("revision_quarantine"), model, revision))
    if await conn.fetchval("SELECT to_regclass('model_load_infos') IS NOT NULL"):
        await conn.execute(
            "DELETE FROM model_load_infos WHERE model_name = $1 AND config_revision IS DISTINCT FROM $2",
            model,
            revision,
        )
    return seq, rows


async def advance(pool: asyncpg.Pool, model: str, revision: str, yaml_text: str) -> list[asyncpg.Record]:
    """Make `revision` current and quarantine every replica of another revision; returns those rows."""
    async with pool.acquire() as conn, conn.transaction():
        return (await advance_on(conn, model, revision, yaml_text))[1]


async def claim_cleanup(pool: asyncpg.Pool) -> asyncpg.Record | None:
    return await pool.fetchrow(q("cleanup_claim"))


async def cleanup_failed(pool: asyncpg.Pool, row_id: str, error: str) -> None:
    await pool.execute(q("cleanup_failed"), row_id, error[:240])


async def cleanup_later(pool: asyncpg.Pool, row_id: str, delay_s: float) -> None:
    await pool.execute(q("cleanup_later"), row_id, delay_s)


async def cleanup_done(pool: asyncpg.Pool, row_id: str) -> None:
    await pool.execute(q("cleanup_done"), row_id)


async def pending_cleanup(pool: asyncpg.Pool, model: str) -> int:
    return int(await pool.fetchval(q("cleanup_pending_count"), model))
