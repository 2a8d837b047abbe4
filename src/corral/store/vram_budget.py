"""Resolve and store per-node VRAM budgets."""

from __future__ import annotations

import asyncpg

from corral.placement.vram_budget import BadVramBudget, budget_bytes
from corral.store.queries import q


async def refresh(pool: asyncpg.Pool, node_id: str) -> None:
    """Re-resolve the stored budget against the node's detected VRAM (after it registered)."""
    row = await pool.fetchrow(q("node_vram_budget_get"), node_id)
    if row is None:
        return
    try:
        ceiling = budget_bytes(row["vram_budget"], int(row["total_vram"]))
    except BadVramBudget:
        ceiling = 0  # a worker-reported budget that does not parse is ignored (logged by the caller)
    await pool.execute(q("node_vram_budget_set"), node_id, row["vram_budget"], ceiling, None)


async def set_budget(pool: asyncpg.Pool, node_id: str, raw: str) -> bool:
    """An admin budget (sticky); "" clears it. Raises BadVramBudget for a value that does not parse."""
    row = await pool.fetchrow(q("node_vram_budget_get"), node_id)
    if row is None:
        return False
    ceiling = budget_bytes(raw, int(row["total_vram"]))
    await pool.execute(q("node_vram_budget_set"), node_id, raw.strip(), ceiling, bool(raw.strip()))
    return True
