"""Reads and writes of the placement step: the cluster snapshot, VRAM soft reservations, demotion."""

from __future__ import annotations

import json

import asyncpg

from corral.placement.snapshot import NodeSnapshot, ReplicaSnapshot
from corral.store.queries import q


async def snapshot(pool: asyncpg.Pool) -> list[NodeSnapshot]:
    nodes = []
    for row in await pool.fetch(q("placement_snapshot")):
        replicas = tuple(
            ReplicaSnapshot(model=r["model"], replica_index=int(r["replica_index"]), state=r["state"],
                            address=r["address"], in_flight=int(r["in_flight"]), last_used_s=float(r["last_used_s"]),
                            vram_bytes=int(r.get("vram_bytes") or 0))
            for r in json.loads(row["replicas"])
        )
        nodes.append(NodeSnapshot(
            id=row["id"], name=row["name"], address=row["address"], http_address=row["http_address"],
            total_vram=int(row["total_vram"]), available_vram=int(row["available_vram"]),
            reserved_vram=int(row["reserved_vram"]), vram_budget_bytes=int(row["vram_budget_bytes"]),
            total_disk=int(row["total_disk"]), available_disk=int(row["available_disk"]),
            max_replicas_per_model=int(row["max_replicas_per_model"]), labels=json.loads(row["labels"]),
            replicas=replicas,
        ))
    return nodes


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
