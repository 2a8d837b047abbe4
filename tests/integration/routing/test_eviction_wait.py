"""When every replica is busy, eviction waits a bounded time and the error names the bound."""

from __future__ import annotations

import asyncpg
import pytest

from corral.routing.eviction import EvictionBusy, Evictor
from corral.store import nodes as node_store
from corral.store import replicas as replica_store


class AllBusy:
    """Every frontend reports one request in flight on every replica."""

    interval_s = 0.05

    def remote_total(self, _key: str) -> int:
        return 1

    def last_used_s(self, _key: str) -> float:
        return 0.0


async def test_all_replicas_busy_waits_then_fails_naming_the_bound(pool: asyncpg.Pool) -> None:
    node = await node_store.register(pool, node_store.NodeFacts(name="w", address="w:1"), "", {}, auto_approve=True)
    for model in ("a", "b"):
        await replica_store.upsert(pool, node_id=node["id"], model=model, replica_index=0, address=f"w:{ord(model)}",
                                   state="loaded", backend="simulator")
    evictor = Evictor(pool, None, AllBusy(), lambda _key: 0, wait_s=0.5)  # type: ignore[arg-type]
    with pytest.raises(EvictionBusy) as info:
        await evictor.evict_for("big")
    message = str(info.value)
    assert "all models busy, cannot evict" in message
    assert "waited 500ms" in message and "CORRAL_EVICTION_WAIT" in message
    rows = await replica_store.of_node(pool, node["id"])
    assert sorted(r["state"] for r in rows) == ["loaded", "loaded"]  # nothing busy was touched
