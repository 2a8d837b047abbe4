"""The store against a real PostgreSQL: migrations, registration, replica rows."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import asyncpg

from corral.store import db
from corral.store import nodes as node_store
from corral.store import placement as placement_store
from corral.store import replicas as replica_store


async def test_two_frontends_migrating_at_once_apply_each_migration_once(
    make_database: Callable[[], str],
) -> None:
    url = make_database()
    pools = [await db.connect(url) for _ in range(3)]
    try:
        results = await asyncio.gather(*(db.migrate(p) for p in pools))
        applied = [name for r in results for name in r]
        assert sorted(applied) == [name for _v, name, _sql in db._migrations()]  # each exactly once
        tables = {r["tablename"] for r in await pools[0].fetch("SELECT tablename FROM pg_tables")}
        assert {"backend_nodes", "node_models", "model_load_jobs", "node_labels"} <= tables
    finally:
        for p in pools:
            await p.close()


FACTS = node_store.NodeFacts(
    name="n1", address="10.0.0.1:50051", http_address="10.0.0.1:50050", total_disk=100
)


async def test_a_new_node_is_pending_unless_auto_approved(pool: asyncpg.Pool) -> None:
    row = await node_store.register(pool, FACTS, "tok", {}, auto_approve=False)
    assert row["status"] == "pending"
    other = await node_store.register(
        pool, node_store.NodeFacts(name="n2", address="a:1"), "tok", {}, auto_approve=True
    )
    assert other["status"] == "healthy"


async def test_re_registration_keeps_the_id_and_drops_stale_replicas(pool: asyncpg.Pool) -> None:
    first = await node_store.register(pool, FACTS, "tok", {"zone": "a"}, auto_approve=True)
    await replica_store.upsert(
        pool,
        node_id=first["id"],
        model="m",
        replica_index=0,
        address="x:1",
        state=replica_store.LOADED,
        backend="simulator",
    )
    second = await node_store.register(pool, FACTS, "tok", {"rack": "7"}, auto_approve=False)
    assert second["id"] == first["id"]
    assert second["status"] == "healthy"  # approved once ⇒ stays approved
    assert await replica_store.of_node(pool, first["id"]) == []
    labels = {r["key"]: r["value"] for r in await pool.fetch("SELECT key, value FROM node_labels")}
    assert labels["zone"] == "a" and labels["rack"] == "7" and labels["node.name"] == "n1"


async def test_token_hash_is_stored_never_the_token(pool: asyncpg.Pool) -> None:
    row = await node_store.register(pool, FACTS, "super-secret", {}, auto_approve=True)
    assert row["token_hash"] != "super-secret" and len(row["token_hash"]) == 64


async def test_only_loaded_replicas_on_healthy_nodes_are_routable(pool: asyncpg.Pool) -> None:
    healthy = await node_store.register(pool, FACTS, "", {}, auto_approve=True)
    pending = await node_store.register(
        pool, node_store.NodeFacts(name="p", address="p:1"), "", {}, auto_approve=False
    )
    for node, state in ((healthy, "loaded"), (pending, "loaded")):
        await replica_store.upsert(
            pool,
            node_id=node["id"],
            model="m",
            replica_index=0,
            address=f"{node['name']}:9",
            state=state,
            backend="simulator",
        )
    await replica_store.upsert(
        pool,
        node_id=healthy["id"],
        model="m",
        replica_index=1,
        address="n1:10",
        state="loading",
        backend="simulator",
    )
    rows = await replica_store.routable(pool, "m")
    assert [(r["node_name"], r["replica_index"]) for r in rows] == [("n1", 0)]


async def test_the_schedulable_snapshot_counts_loaded_models(pool: asyncpg.Pool) -> None:
    node = await node_store.register(pool, FACTS, "", {}, auto_approve=True)
    await replica_store.upsert(
        pool,
        node_id=node["id"],
        model="m",
        replica_index=0,
        address="x:1",
        state="loaded",
        backend="simulator",
    )
    [snap] = await placement_store.snapshot(pool)
    assert (snap.loaded_models, sorted(snap.model_names)) == (1, ["m"])
