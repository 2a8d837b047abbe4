"""The activity record (`gallery_operations`, reference §2.9): every backend and model operation with its
outcome and timing. Shared by every frontend; a finished row is frozen; clearing history deletes the
finished rows for all of them at once."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import asyncpg

from corral.store.queries import q

PENDING, PROCESSING, DOWNLOADING = "pending", "processing", "downloading"
COMPLETED, FAILED, CANCELLED = "completed", "failed", "cancelled"
BACKEND_INSTALL, BACKEND_UPGRADE, BACKEND_DELETE = "backend_install", "backend_upgrade", "backend_delete"
MODEL_INSTALL, MODEL_DELETE, MODEL_UNLOAD = "model_install", "model_delete", "model_unload"
MODEL_LOAD, CONFIG_EDIT = "model_load", "config_edit"
FANOUT = "fanout"  # the parent job of an install to several nodes
HISTORY_LIMIT = 500


@dataclass(frozen=True)
class NewOperation:
    element: str  # the backend or model name
    op_type: str
    node_id: str = ""
    node_name: str = ""
    parent_id: str | None = None
    message: str = ""
    frontend_id: str = ""
    user_id: str = ""

    @property
    def is_backend(self) -> bool:
        return self.op_type.startswith("backend_") or self.op_type == FANOUT

    @property
    def cache_key(self) -> str:
        return f"node:{self.node_id}:{self.element}" if self.node_id else self.element


async def insert(
    conn: asyncpg.Pool | asyncpg.Connection, op: NewOperation, status: str = PENDING, op_id: str | None = None
) -> asyncpg.Record:
    return await conn.fetchrow(
        q("operation_insert"),
        op_id or str(uuid.uuid4()),
        op.parent_id,
        op.element,
        op.cache_key,
        op.is_backend,
        op.op_type,
        status,
        op.node_id,
        op.node_name,
        op.frontend_id,
        op.message,
        op.user_id,
    )


async def record_done(pool: asyncpg.Pool, op: NewOperation) -> None:
    """An operation that completed as it was asked for (a config edit): one finished row."""
    row = await insert(pool, op, status=PROCESSING)
    await finish(pool, row["id"], COMPLETED, message=op.message)


async def delete_unstarted(conn: asyncpg.Pool | asyncpg.Connection, op_id: str) -> None:
    await conn.execute(q("operation_delete"), op_id)


async def start(pool: asyncpg.Pool, op_id: str, frontend_id: str, message: str) -> None:
    await pool.execute(q("operation_start"), op_id, frontend_id, message)


async def progress(
    pool: asyncpg.Pool, op_id: str, *, phase: str, fraction: float, file_name: str, current: str, total: str
) -> None:
    await pool.execute(q("operation_progress"), op_id, phase, fraction, file_name, current, total)


async def busy(pool: asyncpg.Pool, op_id: str, message: str) -> None:
    await pool.execute(q("operation_busy"), op_id, message)


async def retrying(pool: asyncpg.Pool, op_id: str, error: str, attempts: int, message: str) -> None:
    await pool.execute(q("operation_retrying"), op_id, error, attempts, message)


async def finish(pool: asyncpg.Pool, op_id: str, status: str, error: str = "", message: str = "") -> None:
    """End an operation; the fan-out job it belongs to ends with its last node."""
    async with pool.acquire() as conn, conn.transaction():
        parent = await conn.fetchval(q("operation_finish"), op_id, status, error, message)
        if parent:
            await conn.execute(q("operation_finish_parent"), parent)


async def get(pool: asyncpg.Pool, op_id: str) -> asyncpg.Record | None:
    return await pool.fetchrow(q("operation_get"), op_id)


async def children(pool: asyncpg.Pool, op_id: str) -> list[asyncpg.Record]:
    return list(await pool.fetch(q("operation_children"), op_id))


async def live(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    return list(await pool.fetch(q("operations_live")))


async def history(pool: asyncpg.Pool, limit: int = HISTORY_LIMIT) -> list[asyncpg.Record]:
    return list(await pool.fetch(q("operations_history"), limit))


async def clear_history(pool: asyncpg.Pool) -> int:
    status = await pool.execute(q("operations_clear"))
    return int(status.split()[-1])


async def reap_stale(pool: asyncpg.Pool, stale_s: float, error: str) -> int:
    async with pool.acquire() as conn, conn.transaction():
        rows = await conn.fetch(q("operations_reap_stale"), stale_s, error)
        for parent in {r["parent_id"] for r in rows if r["parent_id"]}:
            await conn.execute(q("operation_finish_parent"), parent)
    return len(rows)
