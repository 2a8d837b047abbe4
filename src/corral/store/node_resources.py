"""Nodes' memory and disk as their heartbeats last stored them: read once per traffic interval and per scrape,
never per request (held heartbeats move no figure by more than 256 MiB, heartbeat_rules.py)."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from corral.store.queries import q


@dataclass(frozen=True)
class NodeResources:
    id: str
    name: str
    status: str
    total_vram: int
    available_vram: int
    total_ram: int
    available_ram: int
    total_disk: int
    available_disk: int


async def node_resources(pool: asyncpg.Pool) -> list[NodeResources]:
    return [
        NodeResources(
            id=r["id"],
            name=r["name"],
            status=r["status"],
            total_vram=int(r["total_vram"]),
            available_vram=int(r["available_vram"]),
            total_ram=int(r["total_ram"]),
            available_ram=int(r["available_ram"]),
            total_disk=int(r["total_disk"]),
            available_disk=int(r["available_disk"]),
        )
        for r in await pool.fetch(q("node_resources"))
    ]
