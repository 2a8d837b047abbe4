"""Replica rows (`node_models`): what runs where, in which lifecycle state."""

from __future__ import annotations

import uuid

import asyncpg

from corral.store.queries import q

STAGING, LOADING, LOADED, UNLOADING = "staging", "loading", "loaded", "unloading"


async def upsert(
    pool: asyncpg.Pool,
    *,
    node_id: str,
    model: str,
    replica_index: int,
    address: str,
    state: str,
    backend: str,
    config_revision: str = "",
    vram_bytes: int = 0,
    effective_options_hash: str = "",
) -> asyncpg.Record:
    return await pool.fetchrow(
        q("replica_upsert"),
        str(uuid.uuid4()),
        node_id,
        model,
        replica_index,
        address,
        state,
        backend,
        config_revision,
        vram_bytes,
        effective_options_hash,
    )


async def delete(pool: asyncpg.Pool, *, node_id: str, model: str, replica_index: int, address: str) -> None:
    await pool.execute(q("replica_delete"), node_id, model, replica_index, address)


async def routable(pool: asyncpg.Pool, model: str) -> list[asyncpg.Record]:
    return list(await pool.fetch(q("replicas_routable"), model))


async def of_node(pool: asyncpg.Pool, node_id: str) -> list[asyncpg.Record]:
    return list(await pool.fetch(q("replicas_of_node"), node_id))


async def reclaim_stuck(pool: asyncpg.Pool, orphan_s: float) -> list[asyncpg.Record]:
    return list(await pool.fetch(q("replicas_reclaim_stuck"), orphan_s))


async def mark_unloading(
    pool: asyncpg.Pool, *, node_id: str, model: str, replica_index: int, address: str, lease_s: float = 60.0
) -> bool:
    row = await pool.fetchrow(q("replica_mark_unloading"), node_id, model, replica_index, address, lease_s)
    return row is not None


async def unmark_unloading(
    pool: asyncpg.Pool, *, node_id: str, model: str, replica_index: int, address: str
) -> None:
    await pool.execute(q("replica_unmark_unloading"), node_id, model, replica_index, address)


async def all_routable(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    return list(await pool.fetch(q("replicas_all_routable")))


async def reclaim_model_loads(pool: asyncpg.Pool, model: str) -> list[asyncpg.Record]:
    """Forget the rows of `model` a dead load left staging or loading; returns them (to stop their processes)."""
    return list(await pool.fetch(q("replicas_reclaim_model_loads"), model))
