"""Approval, health monitor and heartbeat checkpointing against a real PostgreSQL."""

from __future__ import annotations

import time

import asyncpg

from corral.nodes.health_monitor import HealthMonitor
from corral.nodes.heartbeat_rules import Beat
from corral.nodes.heartbeats import HeartbeatCheckpointer
from corral.nodes.held_beats import HeldBeats
from corral.store import nodes as node_store
from corral.store import placement as placement_store
from support.rows import present

GIB = 1 << 30


def facts(name: str) -> node_store.NodeFacts:
    return node_store.NodeFacts(name=name, address=f"{name}:50051")


async def _age_heartbeat(pool: asyncpg.Pool, node_id: str, seconds: float) -> None:
    await pool.execute(
        "UPDATE backend_nodes SET last_heartbeat = now() - make_interval(secs => $2), "
        "status_changed_at = now() - make_interval(secs => $2) WHERE id = $1",
        node_id,
        seconds,
    )


async def test_a_pending_node_is_never_schedulable_until_approved(pool: asyncpg.Pool) -> None:
    row = await node_store.register(pool, facts("p1"), "", {}, auto_approve=False)
    assert row["status"] == "pending" and not await placement_store.snapshot(pool)
    approved = await node_store.approve(pool, row["id"])
    assert approved is not None and approved["status"] == "healthy"
    assert [n.name for n in await placement_store.snapshot(pool)] == ["p1"]
    assert await node_store.approve(pool, row["id"]) is None  # approving twice is refused


async def test_a_pending_node_that_went_stale_and_beats_again_is_still_pending(pool: asyncpg.Pool) -> None:
    row = await node_store.register(pool, facts("p2"), "", {}, auto_approve=False)
    monitor = HealthMonitor(pool, HeldBeats(), stale_threshold_s=60.0, interval_s=1.0)
    monitor.watching_since_s = 0.0
    await _age_heartbeat(pool, row["id"], 120)
    assert [c.new for c in await monitor.check_once()] == ["offline"]
    checkpointer = HeartbeatCheckpointer(pool, monitor.held, checkpoint_s=60.0)
    assert await checkpointer.beat(row["id"], Beat(available_ram=GIB))  # an offline node's beat is written
    assert [c.new for c in await monitor.check_once()] == ["pending"]
    assert present(await node_store.get(pool, row["id"]))["status"] == "pending"
    assert not await placement_store.snapshot(pool)


async def test_an_approved_node_recovers_only_on_a_beat_newer_than_its_offline_mark(
    pool: asyncpg.Pool,
) -> None:
    row = await node_store.register(pool, facts("a1"), "", {}, auto_approve=True)
    monitor = HealthMonitor(pool, HeldBeats(), stale_threshold_s=60.0, interval_s=1.0)
    await node_store.set_status(pool, row["id"], "offline", drop_replicas=True)  # it deregistered
    assert await monitor.check_once() == []  # its last beat predates the deregistration
    monitor.held.note(row["id"], time.time() + 1)  # a beat held on some frontend, after the mark
    assert [c.new for c in await monitor.check_once()] == ["healthy"]


async def test_beats_held_by_any_frontend_keep_a_node_fresh(pool: asyncpg.Pool) -> None:
    row = await node_store.register(pool, facts("h1"), "", {}, auto_approve=True)
    held = HeldBeats()
    monitor = HealthMonitor(pool, held, stale_threshold_s=60.0, interval_s=1.0)
    monitor.watching_since_s = 0.0
    await _age_heartbeat(pool, row["id"], 120)
    held.note(row["id"], time.time())
    assert await monitor.check_once() == []
    held.forget(row["id"])
    assert [c.new for c in await monitor.check_once()] == ["offline"]


async def test_twenty_nodes_beating_every_second_with_a_5s_checkpoint_write_once_per_checkpoint(
    pool: asyncpg.Pool,
) -> None:
    await pool.execute("CREATE TABLE hb_updates (node_id varchar(36), at timestamptz DEFAULT now())")
    await pool.execute(
        "CREATE FUNCTION hb_count() RETURNS trigger AS $$ BEGIN "
        "INSERT INTO hb_updates (node_id) VALUES (NEW.id); RETURN NEW; END $$ LANGUAGE plpgsql"
    )
    ids = [
        (await node_store.register(pool, facts(f"n{i:02d}"), "", {}, auto_approve=True))["id"]
        for i in range(20)
    ]
    await pool.execute(
        "CREATE TRIGGER hb_count AFTER UPDATE ON backend_nodes FOR EACH ROW EXECUTE FUNCTION hb_count()"
    )
    now = [1_000.0]
    checkpointer = HeartbeatCheckpointer(pool, HeldBeats(), checkpoint_s=5.0, clock=lambda: now[0])
    for _second in range(30):  # 30 beats per node at 1 s
        for node_id in ids:
            assert await checkpointer.beat(node_id, Beat(available_ram=4 * GIB, total_disk=100 * GIB))
        now[0] += 1.0
    updates = await pool.fetchval("SELECT count(*) FROM hb_updates")
    assert updates == checkpointer.durable_writes == 20 * 6  # t=0 (first), 5, 10, 15, 20, 25
    assert checkpointer.held_beats == 20 * 30 - updates


async def test_a_beat_for_a_deleted_node_reports_unknown_so_the_worker_registers_again(
    pool: asyncpg.Pool,
) -> None:
    row = await node_store.register(pool, facts("d1"), "", {}, auto_approve=True)
    checkpointer = HeartbeatCheckpointer(pool, HeldBeats(), checkpoint_s=60.0)
    assert await checkpointer.beat(row["id"], Beat())
    assert await node_store.delete(pool, row["id"])
    checkpointer.on_node_event(row["id"], "deleted")
    assert not await checkpointer.beat(row["id"], Beat())
