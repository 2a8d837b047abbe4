"""A load whose job this frontend no longer owns (another frontend took it over after this one's heartbeat went
silent, or it was failed or removed elsewhere), on real PostgreSQL and NATS: its waiters here are not failed
with this attempt's end; they follow the job row."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import asyncpg
import nats
import pytest

from corral.loading import job as runner_module
from corral.loading.context import LoadContext
from corral.loading.job import JobSettings, LoadJobRunner
from corral.loading.request_waiters import Outcome, Waiters
from corral.models.config import parse_model_config
from corral.store import load_jobs


@pytest.fixture
async def waiters(pool: asyncpg.Pool, nats_url: str) -> AsyncIterator[Waiters]:
    nc = await nats.connect(nats_url)
    w = Waiters(pool, nc, orphan_s=600.0, poll_s=30.0)
    await w.start()
    yield w
    await nc.close()


async def test_a_load_taken_over_elsewhere_leaves_its_waiters_waiting_for_the_new_owner(
    pool: asyncpg.Pool, waiters: Waiters, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = f"m-{uuid.uuid4().hex[:8]}"
    cfg = parse_model_config(
        {"name": key, "backend": "simulator", "parameters": {"model": key}},
        tmp_path / f"{key}.yaml",
        tmp_path,
    )
    attempt_cancelled = asyncio.Event()

    async def a_long_load(*_args: object) -> None:  # the attempt itself: placement, staging, LoadModel
        try:
            await asyncio.sleep(3600)
        finally:
            attempt_cancelled.set()

    monkeypatch.setattr(runner_module, "cold_load", a_long_load)
    ctx = cast(  # the fields a runner reads before its attempt
        LoadContext, SimpleNamespace(pool=pool, load_timeout_override_s=0.0, install_timeout_s=900.0)
    )
    runner = LoadJobRunner(
        ctx,
        JobSettings(owner="frontend-a", stall_s=600.0, orphan_s=600.0, heartbeat_s=0.1),
        waiters,
        on_loaded=lambda _replica: asyncio.sleep(0),
    )
    claimed, _ = await load_jobs.claim(pool, key, "frontend-a", orphan_s=600.0, failed_grace_s=15.0)
    assert claimed
    with waiters.register(key) as woken:
        runner.start(cfg)
        waiting = asyncio.create_task(waiters.wait(woken, key, budget_s=3.0))
        await asyncio.sleep(0.3)
        await pool.execute(
            "UPDATE model_load_jobs SET owner_replica = 'frontend-b' WHERE tracking_key = $1", key
        )
        await asyncio.wait_for(attempt_cancelled.wait(), 10)  # this frontend's attempt ended at its next beat
        outcome = await waiting
    assert outcome is None  # not failed: the job still runs (under frontend-b); the budget ran out
    job = await load_jobs.get(pool, key)
    assert job is not None and job.state != "failed" and job.owner_replica == "frontend-b"

    with waiters.register(key) as woken:  # the new owner finishes: the waiter here is served
        waiting = asyncio.create_task(waiters.wait(woken, key, budget_s=20.0))
        await asyncio.sleep(0.1)
        await load_jobs.delete(pool, key, "frontend-b")
        await waiters.announce(key, Outcome(ok=True))
        outcome = await asyncio.wait_for(waiting, 10)
    assert outcome is not None and outcome.ok
    await runner.close()
