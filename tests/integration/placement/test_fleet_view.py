"""The frontend's incremental placement view against real PostgreSQL: after any mix of writes it holds exactly
what a whole snapshot reads, it reads only the nodes that changed, and it misses no transaction however
commits interleave with its reads (the xmin watermark of migration 0012)."""

from __future__ import annotations

import random

import asyncpg

from corral.loading.fleet import FleetView
from corral.placement.pipeline import decide
from corral.placement.request import PlacementRequest
from corral.store import labels as label_store
from corral.store import nodes as node_store
from corral.store import placement as placement_store
from corral.store import replicas as replica_store
from support.waiting import wait_for_async

GIB = 1 << 30


async def _node(pool: asyncpg.Pool, name: str, vram_gib: int, zone: str) -> str:
    facts = node_store.NodeFacts(
        name=name,
        address=f"{name}:50051",
        total_vram=80 * GIB,
        available_vram=vram_gib * GIB,
        gpu_vendor="nvidia",
        total_disk=500 * GIB,
        available_disk=400 * GIB,
        max_replicas_per_model=2,
    )
    return str((await node_store.register(pool, facts, "tok", {"zone": zone}, auto_approve=True))["id"])


async def _same_as_snapshot(view: FleetView, pool: asyncpg.Pool) -> None:
    await view.refresh(pool)
    assert view.nodes() == await placement_store.snapshot(pool)


async def test_the_view_equals_a_whole_snapshot_after_random_writes(pool: asyncpg.Pool) -> None:
    rng = random.Random(16)
    ids = [await _node(pool, f"node-{i:02d}", rng.randrange(1, 80), f"z{i % 3}") for i in range(12)]
    view = FleetView()
    await _same_as_snapshot(view, pool)
    assert view.full_reads == 1
    for step in range(60):
        node = rng.choice(ids)
        action = rng.randrange(8)
        if action == 0:
            await node_store.heartbeat(pool, node, {"available_vram": rng.randrange(1, 80) * GIB})
        elif action == 1:
            await label_store.merge(pool, node, {"zone": f"z{rng.randrange(3)}", f"k{step}": "v"})
        elif action == 2:
            await replica_store.upsert(
                pool,
                node_id=node,
                model=f"m{rng.randrange(4)}",
                replica_index=0,
                address=f"{node}:6000{step}",
                state="loaded",
                backend="simulator",
            )
        elif action == 3:
            await pool.execute(
                "DELETE FROM node_models WHERE id = (SELECT id FROM node_models WHERE node_id = $1 LIMIT 1)",
                node,
            )
        elif action == 4:
            await node_store.set_status(pool, node, rng.choice([node_store.OFFLINE, "healthy"]))
        elif action == 5:
            await placement_store.reserve_vram(pool, node, GIB)
        elif action == 6 and len(ids) > 4:
            await node_store.delete(pool, node)
            ids.remove(node)
        else:
            ids.append(await _node(pool, f"new-{step}", rng.randrange(1, 80), "z9"))
        if step % 3 == 0:
            await _same_as_snapshot(view, pool)
    await _same_as_snapshot(view, pool)
    assert view.full_reads == 1, "every later read was incremental"


async def test_a_read_with_nothing_changed_reads_no_node(pool: asyncpg.Pool) -> None:
    for i in range(5):
        await _node(pool, f"quiet-{i}", 40, "z0")
    view = FleetView()
    read: list[placement_store.Changes] = []

    async def nothing_left() -> bool:
        # A transaction open anywhere on the server (another test database's, another stack's) holds xmin
        # back, and the watermark with it: the view then re-reads what it cannot prove it saw, as it must.
        # Once those end, a read with nothing changed reads no node.
        await view.refresh(pool)
        read.append(await placement_store.changes_since(pool, view._watermark or 0))
        return not read[-1].changed

    await wait_for_async(nothing_left, "a watermark past the transactions open during the writes", 60)
    changes = read[-1]
    assert changes.changed == frozenset() and changes.nodes == []
    node = view.nodes()[0]
    await pool.execute("UPDATE backend_nodes SET last_heartbeat = now() WHERE id = $1", node.id)
    assert (await placement_store.changes_since(pool, changes.watermark)).changed == frozenset(), (
        "a heartbeat that changes nothing placement reads logs nothing"
    )
    await node_store.heartbeat(pool, node.id, {"available_vram": 7 * GIB})
    changed = await placement_store.changes_since(pool, changes.watermark)
    assert changed.changed == {node.id} and [n.available_vram for n in changed.nodes] == [7 * GIB]


async def test_a_transaction_that_commits_after_a_read_it_began_before_is_not_missed(
    pool: asyncpg.Pool,
) -> None:
    node = await _node(pool, "slow-writer", 40, "z0")
    view = FleetView()
    await view.refresh(pool)
    async with pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        await conn.execute("UPDATE backend_nodes SET available_vram = $2 WHERE id = $1", node, 3 * GIB)
        await _node(pool, "fast-writer", 10, "z1")  # a later transaction commits first
        await view.refresh(pool)
        assert {n.name for n in view.nodes()} == {"slow-writer", "fast-writer"}
        assert view.index.nodes[node].available_vram == 40 * GIB  # not committed yet
        await tx.commit()
    await view.refresh(pool)
    assert view.index.nodes[node].available_vram == 3 * GIB


async def test_decisions_match_the_linear_pipeline_and_honour_exclusions(pool: asyncpg.Pool) -> None:
    for i in range(8):
        await _node(pool, f"d-{i}", 10 * (i + 1), f"z{i % 2}")
    view = FleetView()
    request = PlacementRequest(model="m", vram_bytes=15 * GIB, selector={"zone": "z1"})
    linear = decide(request, await placement_store.snapshot(pool))
    indexed = await view.decide(pool, request)
    assert indexed.node == linear.node and indexed.node.labels["zone"] == "z1"
    retry = await view.decide(pool, request, excluded={indexed.node.id})
    assert retry.node.id != indexed.node.id and retry.node.labels["zone"] == "z1"
