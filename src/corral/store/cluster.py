"""The registry as model sizing reads it: healthy backend nodes and their memory facts."""

from __future__ import annotations

import json

import asyncpg

from corral.placement.cluster_budget import NodeMemory
from corral.store.queries import q


async def node_memory(pool: asyncpg.Pool) -> list[NodeMemory]:
    return [
        NodeMemory(
            id=r["id"],
            name=r["name"],
            total_vram=int(r["total_vram"]),
            vram_budget_bytes=int(r["vram_budget_bytes"]),
            total_ram=int(r["total_ram"]),
            gpu_vendor=r["gpu_vendor"],
            capability=r["capability"],
            labels=json.loads(r["labels"]),
        )
        for r in await pool.fetch(q("cluster_nodes"))
    ]


async def nodes_by_status(pool: asyncpg.Pool) -> dict[str, int]:
    return {r["status"]: int(r["n"]) for r in await pool.fetch(q("nodes_by_status"))}


async def load_jobs_by_state(pool: asyncpg.Pool) -> dict[str, int]:
    return {r["state"]: int(r["n"]) for r in await pool.fetch(q("load_jobs_by_state"))}
