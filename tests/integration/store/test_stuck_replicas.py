"""Replica rows stuck before serving are reclaimed only when no live load job drives them."""

from __future__ import annotations

import logging

import asyncpg
import nats
import pytest

from corral.replicas.stuck import sweep_once
from corral.store import load_jobs
from corral.store import nodes as node_store
from corral.store import replicas as replica_store


async def test_only_rows_without_a_heartbeating_job_are_reclaimed(
    pool: asyncpg.Pool, nats_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    node = await node_store.register(
        pool, node_store.NodeFacts(name="w", address="w:1"), "", {}, auto_approve=True
    )
    for model in ("abandoned", "driven"):
        await replica_store.upsert(
            pool,
            node_id=node["id"],
            model=model,
            replica_index=0,
            address="w:9",
            state="staging",
            backend="simulator",
        )
    await pool.execute("UPDATE node_models SET updated_at = now() - interval '5 minutes'")
    await load_jobs.claim(pool, "driven", "frontend-x", orphan_s=60, failed_grace_s=15)  # slow but alive
    nc = await nats.connect(nats_url)
    try:
        with caplog.at_level(logging.WARNING):
            assert await sweep_once(pool, nc, orphan_s=60) == 1
    finally:
        await nc.close()
    remaining = [r["model_name"] for r in await replica_store.of_node(pool, node["id"])]
    assert remaining == ["driven"]
    assert "reclaimed replica row abandoned#0" in caplog.text
