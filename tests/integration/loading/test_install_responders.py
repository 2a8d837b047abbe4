"""The install request on real NATS and PostgreSQL: a worker that subscribes a moment late (it registers
first, then subscribes its subjects) is asked again, not marked unhealthy; one that never answers is."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import asyncpg
import nats
import pytest

from corral.bus import subjects
from corral.bus.messages import BackendInstallReply
from corral.loading import job_placement as place
from corral.loading.context import LoadContext
from corral.loading.errors import NodeLost
from corral.models.config import ModelConfig
from corral.placement.snapshot import NodeSnapshot
from corral.store import nodes as node_store
from support.rows import present

CFG = ModelConfig(name="m", backend="simulator", model="m", models_dir=Path("/nonexistent"))


async def _node(pool: asyncpg.Pool, name: str) -> NodeSnapshot:
    facts = node_store.NodeFacts(name=name, address=f"{name}:50051")
    row = await node_store.register(pool, facts, "tok", {}, auto_approve=True)
    return NodeSnapshot(id=row["id"], name=name, address=row["address"], http_address="")


def _ctx(pool: asyncpg.Pool, nc: Any) -> LoadContext:
    unused = cast(Any, None)  # install() uses the bus, the pool and its timeout only
    return LoadContext(
        pool=pool,
        nc=nc,
        http=unused,
        channels=unused,
        staging=unused,
        token="",
        install_timeout_s=5.0,
        load_timeout_override_s=None,
    )


async def test_a_worker_that_subscribes_just_after_the_request_is_asked_again(
    pool: asyncpg.Pool, nats_url: str
) -> None:
    node = await _node(pool, "late-subscriber")
    nc, worker = await nats.connect(nats_url), await nats.connect(nats_url)
    try:

        async def answer(msg: Any) -> None:
            await msg.respond(BackendInstallReply(success=True, address="10.0.0.9:40000").to_json())

        async def subscribe_late() -> None:
            await asyncio.sleep(0.3)
            await worker.subscribe(subjects.backend_install(node.id), cb=answer)
            await worker.flush()

        late = asyncio.create_task(subscribe_late())
        assert (await place.install(_ctx(pool, nc), node, CFG, 0)).address == "10.0.0.9:40000"
        await late
        assert present(await node_store.get(pool, node.id))["status"] == "healthy"
    finally:
        await worker.close()
        await nc.close()


async def test_a_worker_that_never_subscribes_is_marked_unhealthy(pool: asyncpg.Pool, nats_url: str) -> None:
    node = await _node(pool, "absent")
    nc = await nats.connect(nats_url)
    try:
        with pytest.raises(NodeLost, match="no responders"):
            await place.install(_ctx(pool, nc), node, CFG, 0)
        assert present(await node_store.get(pool, node.id))["status"] == "unhealthy"
    finally:
        await nc.close()
