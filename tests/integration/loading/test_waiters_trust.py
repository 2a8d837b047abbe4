"""Load waiters on real PostgreSQL and NATS: an outcome published on the bus is only a hint to read the
job row, so a forged `corral.load.<model>` event can neither fail nor finish anyone's wait."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator

import asyncpg
import nats
import pytest
from nats.aio.client import Client

from corral.loading.request_waiters import Waiters, event_subject
from corral.store import load_jobs

POLL_S = 30.0  # longer than each test: only the event (hint) or the owner can end a wait early


@pytest.fixture
async def waiters(pool: asyncpg.Pool, nats_url: str) -> AsyncIterator[tuple[Waiters, Client]]:
    nc = await nats.connect(nats_url)
    forger = await nats.connect(nats_url)
    w = Waiters(pool, nc, orphan_s=600.0, poll_s=POLL_S)
    await w.start()
    yield w, forger
    await forger.close()
    await nc.close()


def _key() -> str:
    return f"m-{uuid.uuid4().hex[:8]}"


async def _forge(forger: Client, key: str, ok: bool, error: str = "") -> None:
    body = {"tracking_key": key, "ok": ok, "error": error or None, "kind": "load"}
    await forger.publish(event_subject(key), json.dumps(body).encode())
    await forger.flush()


async def test_a_forged_failure_event_does_not_fail_a_wait_while_the_job_still_runs(
    pool: asyncpg.Pool, waiters: tuple[Waiters, Client]
) -> None:
    w, forger = waiters
    key = _key()
    claimed, _ = await load_jobs.claim(pool, key, "owner-1", orphan_s=600.0, failed_grace_s=15.0)
    assert claimed
    with w.register(key) as woken:
        waiting = asyncio.create_task(w.wait(woken, key, budget_s=3.0))
        await asyncio.sleep(0.2)
        await _forge(forger, key, ok=False, error="forged: the model is broken")
        outcome = await waiting
    assert outcome is None  # the budget ran out: the running job was not declared failed by the forger


async def test_a_forged_success_event_does_not_end_a_wait_while_the_job_still_runs(
    pool: asyncpg.Pool, waiters: tuple[Waiters, Client]
) -> None:
    w, forger = waiters
    key = _key()
    await load_jobs.claim(pool, key, "owner-1", orphan_s=600.0, failed_grace_s=15.0)
    with w.register(key) as woken:
        waiting = asyncio.create_task(w.wait(woken, key, budget_s=3.0))
        await asyncio.sleep(0.2)
        await _forge(forger, key, ok=True)
        assert await waiting is None


async def test_a_real_failure_reaches_the_waiter_at_once_with_the_cause_from_the_job_row(
    pool: asyncpg.Pool, waiters: tuple[Waiters, Client]
) -> None:
    w, forger = waiters
    key = _key()
    await load_jobs.claim(pool, key, "owner-1", orphan_s=600.0, failed_grace_s=15.0)
    with w.register(key) as woken:
        waiting = asyncio.create_task(w.wait(woken, key, budget_s=20.0))
        await asyncio.sleep(0.2)
        await load_jobs.fail(pool, key, "owner-1", "loading model m: out of memory on w1")
        await _forge(forger, key, ok=False, error="a different text on the bus")  # the peer owner's event
        outcome = await asyncio.wait_for(waiting, 10.0)  # well before the 30 s poll: the event woke it
    assert outcome is not None and not outcome.ok
    assert outcome.error == "loading model m: out of memory on w1"


async def test_a_finished_job_ends_the_wait_at_once_when_its_event_arrives(
    pool: asyncpg.Pool, waiters: tuple[Waiters, Client]
) -> None:
    w, forger = waiters
    key = _key()
    await load_jobs.claim(pool, key, "owner-1", orphan_s=600.0, failed_grace_s=15.0)
    with w.register(key) as woken:
        waiting = asyncio.create_task(w.wait(woken, key, budget_s=20.0))
        await asyncio.sleep(0.2)
        await load_jobs.delete(pool, key, "owner-1")
        await _forge(forger, key, ok=True)
        outcome = await asyncio.wait_for(waiting, 10.0)
    assert outcome is not None and outcome.ok
