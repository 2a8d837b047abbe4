"""Reads and writes of the placement step: the cluster snapshot, VRAM soft reservations, demotion."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from corral.placement.snapshot import NodeSnapshot, ReplicaSnapshot
from corral.store.queries import q


async def snapshot(pool: asyncpg.Pool) -> list[NodeSnapshot]:
    """Healthy approved nodes with their labels and replica rows, read in one repeatable-read transaction."""
    return (await snapshot_with_watermark(pool))[0]


async def snapshot_with_watermark(pool: asyncpg.Pool) -> tuple[list[NodeSnapshot], int]:
    """The whole snapshot and the watermark to read changes after it from (`changes_since`)."""
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        watermark = int(await conn.fetchval(q("placement_watermark")))
        node_rows = await conn.fetch(q("placement_nodes"))
        label_rows = await conn.fetch(q("placement_labels"))
        replica_rows = await conn.fetch(q("placement_replicas"))
    return _snapshots(node_rows, label_rows, replica_rows), watermark


@dataclass(frozen=True)
class Changes:
    """What changed since a watermark: the ids of every changed node, the placeable ones among them as
    snapshots (a changed id without a snapshot left placement: deleted, unhealthy, drained...), and the
    watermark to read the next changes after."""

    changed: frozenset[str]
    nodes: list[NodeSnapshot]
    watermark: int


async def changes_since(pool: asyncpg.Pool, watermark: int) -> Changes:
    """The nodes changed by transactions that the snapshot behind `watermark` could not see, re-read whole."""
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        next_watermark = int(await conn.fetchval(q("placement_watermark")))
        ids = [r["node_id"] for r in await conn.fetch(q("placement_changed_since"), watermark)]
        if not ids:
            return Changes(frozenset(), [], next_watermark)
        node_rows = await conn.fetch(q("placement_nodes_of"), ids)
        label_rows = await conn.fetch(q("placement_labels_of"), ids)
        replica_rows = await conn.fetch(q("placement_replicas_of"), ids)
    return Changes(frozenset(ids), _snapshots(node_rows, label_rows, replica_rows), next_watermark)


async def prune_changes(pool: asyncpg.Pool, retention_s: float) -> None:
    await pool.execute(q("placement_changes_prune"), retention_s)


def _snapshots(
    node_rows: Sequence[asyncpg.Record],
    label_rows: Sequence[asyncpg.Record],
    replica_rows: Sequence[asyncpg.Record],
) -> list[NodeSnapshot]:
    labels: dict[str, dict[str, str]] = {}
    for node_id, key, value in label_rows:
        labels.setdefault(node_id, {})[key] = value
    replicas: dict[str, list[ReplicaSnapshot]] = {}
    for node_id, model, index, state, address, in_flight, last_used_s, vram_bytes in replica_rows:
        replicas.setdefault(node_id, []).append(
            ReplicaSnapshot(
                model=model,
                replica_index=int(index),
                state=state,
                address=address,
                in_flight=int(in_flight),
                last_used_s=float(last_used_s),
                vram_bytes=int(vram_bytes or 0),
            )
        )
    return [
        NodeSnapshot(
            id=row["id"],
            name=row["name"],
            address=row["address"],
            http_address=row["http_address"],
            total_vram=int(row["total_vram"]),
            available_vram=int(row["available_vram"]),
            reserved_vram=int(row["reserved_vram"]),
            vram_budget_bytes=int(row["vram_budget_bytes"]),
            total_disk=int(row["total_disk"]),
            available_disk=int(row["available_disk"]),
            max_replicas_per_model=int(row["max_replicas_per_model"]),
            labels=labels.get(row["id"], {}),
            replicas=tuple(replicas.get(row["id"], ())),
        )
        for row in node_rows
    ]


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
