"""The reconciler's back-off against a real PostgreSQL: three unsatisfiable passes, then a cooldown that a
registry change (a node registering, a label) ends at once."""

from __future__ import annotations

from types import SimpleNamespace

import asyncpg

from corral.placement.rules import RuleSpec
from corral.replicas.reconciler import ReconcilerSettings, ReplicaReconciler
from corral.store import labels as label_store
from corral.store import nodes as node_store
from corral.store import scheduling as scheduling_store


def _reconciler(pool: asyncpg.Pool) -> ReplicaReconciler:
    router = SimpleNamespace(
        ctx=SimpleNamespace(pool=pool)
    )  # no replica exists: nothing is loaded or stopped
    return ReplicaReconciler(router, {}, {}, ReconcilerSettings(cooldown_s=300.0))  # type: ignore[arg-type]


async def _rule(pool: asyncpg.Pool) -> tuple[int, bool, str]:
    rule = await scheduling_store.get(pool, "m")
    assert rule is not None
    return rule.unsatisfiable_ticks, rule.unsatisfiable_until_s is not None, rule.unsatisfiable_reason


async def test_an_unsatisfiable_rule_backs_off_until_a_node_registers(pool: asyncpg.Pool) -> None:
    await scheduling_store.upsert(pool, RuleSpec("m", min_replicas=1, node_selector={"tier": "gpu"}))
    reconciler = _reconciler(pool)
    for _ in range(4):  # the fourth pass is skipped: the rule cools down after three
        assert await reconciler.tick()
    ticks, cooling, reason = await _rule(pool)
    assert (ticks, cooling) == (3, True)
    assert reason == "m needs 1 more replica(s) but no healthy worker node is registered"
    await node_store.register(pool, node_store.NodeFacts(name="w", address="w:1"), "", {}, auto_approve=True)
    reconciler.on_node_event("w", "healthy")  # as the lifecycle's node events deliver it
    await reconciler.tick()
    ticks, cooling, reason = await _rule(pool)
    assert (ticks, cooling) == (1, False)  # counted afresh, with the new reason
    assert 'node_selector {"tier": "gpu"} matches none of the 1 healthy node(s)' in reason


async def test_a_label_change_ends_the_cooldown_without_any_event(pool: asyncpg.Pool) -> None:
    node = await node_store.register(
        pool, node_store.NodeFacts(name="w", address="w:1"), "", {}, auto_approve=True
    )
    await scheduling_store.upsert(pool, RuleSpec("m", min_replicas=1, node_selector={"tier": "gpu"}))
    reconciler = _reconciler(pool)
    for _ in range(3):
        await reconciler.tick()
    assert (await _rule(pool))[:2] == (3, True)
    await reconciler.tick()
    assert (await _rule(pool))[:2] == (3, True)  # cooling down: left alone
    await label_store.merge(pool, node["id"], {"tier": "gpu"})  # now it matches: retried at once
    await reconciler.tick()
    ticks, cooling, reason = await _rule(pool)
    assert (ticks, cooling) == (
        0,
        False,
    ) and "has no configuration on this frontend and no replay info yet" in reason


async def test_only_one_frontend_reconciles_at_a_time(pool: asyncpg.Pool) -> None:
    from corral.store.locks import KEY_REPLICA_RECONCILER

    async with pool.acquire() as conn:
        await conn.execute("SELECT pg_advisory_lock($1)", KEY_REPLICA_RECONCILER)  # another frontend's pass
        assert await _reconciler(pool).tick() is False
        await conn.execute("SELECT pg_advisory_unlock($1)", KEY_REPLICA_RECONCILER)
    assert await _reconciler(pool).tick() is True
