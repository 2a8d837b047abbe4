"""Reads and writes of the placement step: the cluster snapshot, VRAM soft reservations, demotion."""

from __future__ import annotations

import asyncpg

from corral.placement.snapshot import NodeSnapshot, ReplicaSnapshot
from corral.store.queries import q


async def snapshot(pool: asyncpg.Pool) -> list[NodeSnapshot]:
    """Healthy approved nodes with their labels and replica rows, read in one repeatable-read transaction."""
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        node_rows = await conn.fetch(q("placement_nodes"))
        label_rows = await conn.fetch(q("placement_labels"))
        replica_rows = await conn.fetch(q("placement_replicas"))
    labels: dict[str, dict[str, str]] = {}
    for node_id, key, value in label_rows:
        labels.setdefault(node_id, {})[key] = value
    replicas: dict[str, list[ReplicaSnapshot]] = {}
    for node_id, model, index, state, address, in_flight, last_used_s, vram_bytes in replica_rows:
        replicas.setdefault(node_id, []).append(ReplicaSnapshot(
            model=model, replica_index=int(index), state=state, address=address, in_flight=int(in_flight),
            last_used_s=float(last_used_s), vram_bytes=int(vram_bytes or 0)))
    return [NodeSnapshot(
        id=row["id"], name=row["name"], address=row["address"], http_address=row["http_address"],
        total_vram=int(row["total_vram"]), available_vram=int(row["available_vram"]),
        reserved_vram=int(row["reserved_vram"]), vram_budget_bytes=int(row["vram_budget_bytes"]),
        total_disk=int(row["total_disk"]), available_disk=int(row["available_disk"]),
        max_replicas_per_model=int(row["max_replicas_per_model"]), labels=labels.get(row["id"], {}),
        replicas=tuple(replicas.get(row["id"], ())),
    ) for row in node_rows]


async def reserve_vram(pool: asyncpg.Pool, node_id: str, vram_bytes: int) -> bool:
    if vram_bytes <= 0:
        return False
    return await pool.fetchrow(q("vram_reserve"), node_id, vram_bytes) is not None


async def release_vram(pool: asyncpg.Pool, node_id: str, vram_bytes: int) -> None:
    if vram_bytes > 0:
        await pool.execute(q("vram_release"), node_id, vram_bytes)


async def credit_vram(pool: asyncpg.Pool, node_id: str, vram_bytes: int) -> None:
    if vram_bytes > 0:
        await pool.execute(q("vram_credit"), node_id, vram_bytes)


async def mark_unhealthy(pool: asyncpg.Pool, node_id: str) -> None:
    await pool.execute(q("node_mark_unhealthy"), node_id)
