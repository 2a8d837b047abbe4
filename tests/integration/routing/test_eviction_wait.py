"""Eviction on real PostgreSQL: busy replicas are waited for (bounded, the error names the bound), and a
model that cannot fit on any node it may use stops nothing and says why."""

from __future__ import annotations

import asyncpg
import pytest

from corral.placement.errors import PlacementError
from corral.placement.pipeline import Decision, decide
from corral.placement.request import PlacementRequest
from corral.placement.snapshot import NodeSnapshot, ReplicaSnapshot
from corral.routing.eviction import EvictionBusy, Evictor
from corral.store import nodes as node_store
from corral.store import placement as placement_store
from corral.store import replicas as replica_store

MIB = 1 << 20


class AllBusy:
    """Every frontend reports one request in flight on every replica."""

    interval_s = 0.05

    def remote_total(self, _key: str) -> int:
        return 1

    def last_used_s(self, _key: str) -> float:
        return 0.0


async def _node_with_two_replicas(pool: asyncpg.Pool) -> str:
    facts = node_store.NodeFacts(name="w", address="w:1", total_vram=16 * MIB, available_vram=2 * MIB)
    node = await node_store.register(pool, facts, "", {}, auto_approve=True)
    for model in ("a", "b"):
        await replica_store.upsert(
            pool,
            node_id=node["id"],
            model=model,
            replica_index=0,
            address=f"w:{ord(model)}",
            state="loaded",
            backend="simulator",
            vram_bytes=4 * MIB,
        )
    return str(node["id"])


async def _decision(pool: asyncpg.Pool, need_bytes: int) -> Decision:
    return decide(PlacementRequest(model="big", vram_bytes=need_bytes), await placement_store.snapshot(pool))


async def test_all_replicas_busy_waits_then_fails_naming_the_bound(pool: asyncpg.Pool) -> None:
    node_id = await _node_with_two_replicas(pool)
    evictor = Evictor(pool, None, AllBusy(), lambda _key: 0, wait_s=0.5)  # type: ignore[arg-type]
    with pytest.raises(EvictionBusy) as info:
        await evictor.make_room(await _decision(pool, 6 * MIB))
    message = str(info.value)
    assert "all models busy, cannot evict" in message
    assert "waited 500ms" in message and "CORRAL_EVICTION_WAIT" in message
    rows = await replica_store.of_node(pool, node_id)
    assert sorted(r["state"] for r in rows) == ["loaded", "loaded"]  # nothing busy was touched


async def test_a_fit_no_eviction_can_make_stops_nothing_and_says_why(pool: asyncpg.Pool) -> None:
    node_id = await _node_with_two_replicas(pool)
    evictor = Evictor(pool, None, AllBusy(), lambda _key: 0, wait_s=0.5)  # type: ignore[arg-type]
    with pytest.raises(PlacementError) as info:
        await evictor.make_room(await _decision(pool, 11 * MIB))
    assert str(info.value) == (
        "scheduling big: no node it may use can be freed enough by eviction: it needs 11.5 MB of VRAM, but "
        "w has 2.1 MB free and 8.4 MB in 2 evictable replica(s) (total 10.5 MB)"
    )
    rows = await replica_store.of_node(pool, node_id)
    assert sorted(r["state"] for r in rows) == ["loaded", "loaded"]


class NoneInFlight(AllBusy):
    def remote_total(self, _key: str) -> int:
        return 0


async def test_a_replica_whose_model_has_callers_queued_is_not_evicted(pool: asyncpg.Pool) -> None:
    """The queue feeds the placement: nothing is in flight on `a` this instant, but callers wait for it."""
    node_id = await _node_with_two_replicas(pool)
    evictor = Evictor(pool, None, NoneInFlight(), lambda _key: 0, wait_s=0.5)  # type: ignore[arg-type]
    evictor.waiting = lambda model: 3 if model == "a" else 0
    assert not evictor._idle(*await _replica_of(pool, "a"))
    assert evictor._idle(*await _replica_of(pool, "b"))
    evictor.waiting = lambda model: 3  # both queued for: room for `big` waits, then says so
    with pytest.raises(EvictionBusy):
        await evictor.make_room(await _decision(pool, 6 * MIB))
    rows = await replica_store.of_node(pool, node_id)
    assert sorted(r["state"] for r in rows) == ["loaded", "loaded"]


async def _replica_of(pool: asyncpg.Pool, model: str) -> tuple[NodeSnapshot, ReplicaSnapshot]:
    node = (await placement_store.snapshot(pool))[0]
    return node, next(r for r in node.replicas if r.model == model)
