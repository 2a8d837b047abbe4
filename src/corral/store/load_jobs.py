"""Durable cold-load jobs (`model_load_jobs`): the primary key is the guard against duplicate loads."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import asyncpg

from corral.store.queries import q


@dataclass(frozen=True)
class JobSnapshot:
    tracking_key: str
    state: str
    owner_replica: str
    node_id: str
    node_name: str
    bytes_sent: int
    total_bytes: int
    file_index: int
    total_files: int
    last_error: str
    error_kind: str  # "placement" (no node fits) or "load"
    silent_s: float  # seconds since the owner's last heartbeat
    moving_s: float | None  # seconds since the first byte moved
    install: dict[str, Any] | None = None  # the worker's backend install progress (and worker_busy), if any

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> JobSnapshot:
        return cls(
            tracking_key=row["tracking_key"],
            state=row["state"],
            owner_replica=row["owner_replica"],
            node_id=row["node_id"],
            node_name=row["node_name"],
            bytes_sent=int(row["bytes_sent"]),
            total_bytes=int(row["total_bytes"]),
            file_index=int(row["file_index"]),
            total_files=int(row["total_files"]),
            last_error=row["last_error"],
            error_kind=row.get("error_kind") or "",
            silent_s=float(row.get("silent_s") or 0.0),
            moving_s=row.get("moving_s"),
            install=_install(row.get("install_progress")),
        )


def _install(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    value = json.loads(raw) if isinstance(raw, str) else raw
    return dict(value) if isinstance(value, dict) else None


async def claim(
    pool: asyncpg.Pool, key: str, owner: str, *, orphan_s: float, failed_grace_s: float
) -> tuple[bool, JobSnapshot | None]:
    """One statement. (True, job) when this frontend now owns the load; else (False, the existing job).

    (False, None) means the existing job vanished between the two reads: the caller claims again.
    """
    row = await pool.fetchrow(q("load_job_claim"), key, owner, orphan_s, failed_grace_s)
    if row is not None:
        return True, JobSnapshot.from_row(row)
    return False, await get(pool, key)


async def get(pool: asyncpg.Pool, key: str) -> JobSnapshot | None:
    row = await pool.fetchrow(q("load_job_get"), key)
    return JobSnapshot.from_row(row) if row else None


async def heartbeat(
    pool: asyncpg.Pool,
    key: str,
    owner: str,
    *,
    state: str,
    node_id: str,
    node_name: str,
    replica_index: int,
    bytes_sent: int,
    total_bytes: int,
    file_index: int,
    total_files: int,
    moving: bool,
    install: dict[str, Any] | None = None,
) -> bool:
    """False when this frontend no longer owns the job (it was taken over)."""
    row = await pool.fetchrow(
        q("load_job_heartbeat"),
        key,
        owner,
        state,
        node_id,
        node_name,
        replica_index,
        bytes_sent,
        total_bytes,
        file_index,
        total_files,
        moving,
        None if install is None else json.dumps(install),
    )
    return row is not None


async def fail(pool: asyncpg.Pool, key: str, owner: str, error: str, kind: str = "load") -> None:
    await pool.execute(q("load_job_fail"), key, owner, error, kind)


async def delete(pool: asyncpg.Pool, key: str, owner: str) -> None:
    await pool.execute(q("load_job_delete"), key, owner)


async def listing(pool: asyncpg.Pool, limit: int) -> list[JobSnapshot]:
    return [JobSnapshot.from_row(r) for r in await pool.fetch(q("load_job_listing"), limit)]
