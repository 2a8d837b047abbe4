"""Durable backend intents and the activity record on a real PostgreSQL (issue 11)."""

from __future__ import annotations

import asyncio

import asyncpg

from corral.store import backend_ops, operations
from corral.store import nodes as node_store


async def _node(pool: asyncpg.Pool, name: str) -> str:
    node = await node_store.register(
        pool, node_store.NodeFacts(name=name, address=f"{name}:1"), "", {}, auto_approve=True
    )
    return str(node["id"])


async def _operation(pool: asyncpg.Pool, operation_id: str) -> asyncpg.Record:
    row = await operations.get(pool, operation_id)
    assert row is not None, f"operation {operation_id} not found"
    return row


def _op(node_id: str, backend: str = "simulator", parent: str | None = None) -> operations.NewOperation:
    return operations.NewOperation(backend, operations.BACKEND_INSTALL, node_id, "w", parent_id=parent)


async def test_two_frontends_never_claim_one_intent_and_a_dead_lease_is_resumed(pool: asyncpg.Pool) -> None:
    node = await _node(pool, "w1")
    op_id, new = await backend_ops.record(pool, node, "simulator", backend_ops.INSTALL, _op(node))
    again, joined_new = await backend_ops.record(pool, node, "simulator", backend_ops.INSTALL, _op(node))
    assert new and not joined_new and again == op_id  # a repeated request joins the queued intent
    claims = await asyncio.gather(*(backend_ops.claim(pool, f"frontend-{i}", 0.5) for i in range(8)))
    held = [c for c in claims if c is not None]
    assert len(held) == 1 and held[0].operation_id == op_id
    assert await backend_ops.claim(pool, "frontend-late", 0.5) is None
    await asyncio.sleep(0.7)  # the holder died: its lease runs out, another frontend resumes the intent
    resumed = await backend_ops.claim(pool, "frontend-other", 30)
    assert resumed is not None and resumed.id == held[0].id
    assert not await backend_ops.renew(pool, resumed.id, "frontend-0", 30)  # the old holder cannot renew it


async def test_retry_and_busy_timing(pool: asyncpg.Pool) -> None:
    node = await _node(pool, "w1")
    await backend_ops.record(pool, node, "simulator", backend_ops.INSTALL, _op(node))
    intent = await backend_ops.claim(pool, "f", 30)
    assert intent is not None
    await backend_ops.later(pool, intent.id, "worker still installing", 60)  # busy: no attempt counted
    row = await pool.fetchrow(
        "SELECT attempts, next_retry_at - now() AS wait, lease_owner FROM pending_backend_ops"
    )
    assert row["attempts"] == 0 and row["wait"].total_seconds() > 55 and row["lease_owner"] == ""
    await backend_ops.retry(pool, intent.id, 1, "boom", 0)
    again = await backend_ops.claim(pool, "f", 30)
    assert again is not None and again.attempts == 1


async def test_draining_nodes_lose_their_intents(pool: asyncpg.Pool) -> None:
    node = await _node(pool, "w1")
    other = await _node(pool, "w2")
    await backend_ops.record(pool, node, "simulator", backend_ops.INSTALL, _op(node))
    await backend_ops.record(pool, other, "simulator", backend_ops.INSTALL, _op(other))
    await node_store.drain(pool, node, by=node_store.ADMIN, drop_replicas=True)
    dropped = await backend_ops.prune(pool, 900)
    assert [r["node_id"] for r in dropped] == [node]
    assert await pool.fetchval("SELECT count(*) FROM pending_backend_ops") == 1


async def test_a_fanout_job_finishes_with_its_last_node_and_history_clears(pool: asyncpg.Pool) -> None:
    a, b = await _node(pool, "w1"), await _node(pool, "w2")
    queued, _ = await backend_ops.record(pool, a, "simulator", backend_ops.INSTALL, _op(a))
    parent = await operations.insert(pool, operations.NewOperation("simulator", operations.FANOUT))
    kid_a, _ = await backend_ops.record(
        pool, a, "simulator", backend_ops.INSTALL, _op(a, parent=parent["id"]), take_over=True
    )
    kid_b, _ = await backend_ops.record(
        pool, b, "simulator", backend_ops.INSTALL, _op(b, parent=parent["id"])
    )
    assert kid_a != queued  # the job took the queued intent over; the old row is closed, pointing at the job
    assert (await _operation(pool, queued))["status"] == operations.CANCELLED
    await operations.finish(pool, kid_a, operations.COMPLETED)
    assert (await _operation(pool, parent["id"]))["finished_at"] is None
    await operations.finish(pool, kid_b, operations.FAILED, "no such backend")
    done = await _operation(pool, parent["id"])
    assert done["finished_at"] is not None and done["status"] == operations.FAILED
    await operations.finish(pool, kid_b, operations.COMPLETED)  # finished rows are frozen
    assert (await _operation(pool, kid_b))["status"] == operations.FAILED
    live = await operations.insert(pool, _op(b, backend="other"))
    assert await operations.clear_history(pool) == 2  # the job (with its node rows) and the closed row
    assert [r["id"] for r in await operations.live(pool)] == [live["id"]]
    assert await operations.history(pool) == []
