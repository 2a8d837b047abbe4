"""Agent jobs (`agent_jobs`): MCP CI jobs and agent chats run on agent workers, with their trace and outcome."""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from corral.store.queries import q

KINDS = ("mcp-ci", "agent")
FINISHED = ("completed", "failed", "cancelled")


async def insert(pool: asyncpg.Pool, job_id: str, kind: str, model: str, prompt: str) -> asyncpg.Record:
    return await pool.fetchrow(q("agent_job_insert"), job_id, kind, model, prompt)


async def get(pool: asyncpg.Pool, job_id: str) -> asyncpg.Record | None:
    return await pool.fetchrow(q("agent_job_get"), job_id)


async def listing(pool: asyncpg.Pool, limit: int = 100) -> list[asyncpg.Record]:
    return list(await pool.fetch(q("agent_jobs_list"), limit))


async def progress(
    pool: asyncpg.Pool, job_id: str, status: str, node_id: str, trace: dict[str, Any] | None, seq: int = 0
) -> None:
    """Record a progress event; a trace entry with its `seq` (1, 2, …) is kept once, in seq order."""
    entry = {**trace, "seq": seq} if trace is not None and seq else trace
    await pool.execute(
        q("agent_job_progress"),
        job_id,
        status,
        node_id,
        json.dumps(entry) if entry is not None else None,
        seq,
    )


async def finish(
    pool: asyncpg.Pool,
    job_id: str,
    status: str,
    node_id: str,
    result: str,
    error: str,
    trace_count: int | None = None,
) -> None:
    await pool.execute(q("agent_job_finish"), job_id, status, node_id, result, error, trace_count)
