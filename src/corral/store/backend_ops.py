"""Durable backend intents (`pending_backend_ops`, reference §2.8): install, upgrade or delete a backend
on one node, retried with backoff until done, dead-lettered, or the node is gone. A frontend holds an
intent by a short lease it renews while it drives it; a dead frontend's lease runs out and another
frontend resumes the intent."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import asyncpg

from corral.store import operations
from corral.store.queries import q

INSTALL, UPGRADE, DELETE = "install", "upgrade", "delete"
OPS = (INSTALL, UPGRADE, DELETE)


@dataclass(frozen=True)
class Intent:
    id: int
    node_id: str
    backend: str
    op: str
    galleries: str | None  # the request's backend_galleries (a JSON string), passed to the worker as is
    request: dict[str, Any]  # uri, name, alias
    operation_id: str | None
    attempts: int

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Intent:
        galleries = bytes(row["galleries"]).decode() if row["galleries"] is not None else None
        request = row["request"]
        return cls(
            int(row["id"]),
            row["node_id"],
            row["backend"],
            row["op"],
            galleries,
            json.loads(request) if isinstance(request, str) else dict(request or {}),
            row["operation_id"],
            int(row["attempts"]),
        )


async def record(
    pool: asyncpg.Pool,
    node_id: str,
    backend: str,
    op: str,
    operation: operations.NewOperation,
    *,
    galleries: str | None = None,
    request: dict[str, Any] | None = None,
    take_over: bool = False,
) -> tuple[str, bool]:
    """Store the intent and its activity row; returns (operation id, whether it is new). A request for an
    intent already queued joins it: the caller gets the queued operation's id — unless `take_over` (a
    fan-out job's per-node row), which moves the intent to the new row and closes the old one."""
    async with pool.acquire() as conn, conn.transaction():
        row = await operations.insert(conn, operation)
        op_id = await conn.fetchval(
            q("backend_op_upsert"),
            node_id,
            backend,
            op,
            galleries.encode() if galleries is not None else None,
            json.dumps(request or {}),
            row["id"],
        )
        if op_id == row["id"]:
            return str(op_id), True
        if not take_over:
            await operations.delete_unstarted(conn, row["id"])
            return str(op_id), False
        await conn.execute(q("backend_op_move"), node_id, backend, op, row["id"])
        await conn.execute(q("operation_superseded"), op_id, f"merged into job {operation.parent_id}")
        return str(row["id"]), True


async def claim(pool: asyncpg.Pool, owner: str, lease_s: float) -> Intent | None:
    row = await pool.fetchrow(q("backend_op_claim"), owner, lease_s)
    return None if row is None else Intent.from_row(row)


async def renew(pool: asyncpg.Pool, intent_id: int, owner: str, lease_s: float) -> bool:
    return await pool.fetchval(q("backend_op_renew"), intent_id, owner, lease_s) is not None


async def done(pool: asyncpg.Pool, intent_id: int) -> None:
    await pool.execute(q("backend_op_done"), intent_id)


async def retry(pool: asyncpg.Pool, intent_id: int, attempts: int, error: str, delay_s: float) -> None:
    await pool.execute(q("backend_op_retry"), intent_id, attempts, error, delay_s)


async def later(pool: asyncpg.Pool, intent_id: int, note: str, delay_s: float) -> None:
    await pool.execute(q("backend_op_later"), intent_id, note, delay_s)


async def prune(pool: asyncpg.Pool, stale_s: float) -> list[asyncpg.Record]:
    return list(await pool.fetch(q("backend_op_prune"), stale_s))


async def of_operation(pool: asyncpg.Pool, op_id: str) -> list[asyncpg.Record]:
    return list(await pool.fetch(q("backend_ops_of_operation"), op_id))
