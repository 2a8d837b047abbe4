"""Batch lines against a real PostgreSQL (store/batches.py): frontends claiming at once never get the same line, a
lapsed lease is claimed again, the late answer of a claim that lapsed is dropped, and a batch is only finished
once no line runs on a live lease."""

from __future__ import annotations

import asyncio

import asyncpg

from corral.store import batches

BATCH = "batch_one"


async def _batch_of(pool: asyncpg.Pool, lines: int) -> None:
    await batches.insert_batch(
        pool, BATCH, "owner", ("tenant", ""), ("/v1/chat/completions", "file-x", "24h"), 3600, None
    )
    async with pool.acquire() as conn, conn.transaction():
        await batches.add_lines(
            conn, BATCH, [(n, f"c{n}", "/v1/chat/completions", "{}") for n in range(1, lines + 1)]
        )
        await batches.start(conn, BATCH, lines, "m")


async def test_frontends_claiming_at_once_never_get_the_same_line(pool: asyncpg.Pool) -> None:
    await _batch_of(pool, 40)
    claims = await asyncio.gather(*(batches.claim_lines(pool, f"frontend-{i}", 7, 60) for i in range(6)))
    lines = [row["line"] for claim in claims for row in claim]
    assert sorted(lines) == list(range(1, 41))  # 6 x 7 asked, 40 there: each once
    assert await batches.claim_lines(pool, "late", 5, 60) == []


async def test_a_lapsed_lease_is_claimed_again_and_the_first_claimants_late_answer_is_dropped(
    pool: asyncpg.Pool,
) -> None:
    await _batch_of(pool, 1)
    [first] = await batches.claim_lines(pool, "killed", 1, 60)
    assert await batches.claim_lines(pool, "other", 1, 60) == []  # held by a live lease
    await pool.execute("UPDATE batch_lines SET lease_until = now() - interval '1 second'")  # the lease lapsed
    [again] = await batches.claim_lines(pool, "other", 1, 60)
    assert again["line"] == first["line"]
    await batches.line_done(
        pool, BATCH, 1, (True, "late"), "killed", (5, 5)
    )  # not its line any more: dropped
    await batches.line_done(pool, BATCH, 1, (True, "kept"), "other", (3, 4))
    row = await batches.batch_row(pool, BATCH, "owner")
    assert row is not None
    assert (row["completed"], row["failed"], row["input_tokens"], row["output_tokens"]) == (1, 0, 3, 4)
    assert await pool.fetchval("SELECT result FROM batch_lines") == "kept"


async def test_a_cancelling_batch_is_finished_only_when_no_line_runs_on_a_live_lease(
    pool: asyncpg.Pool,
) -> None:
    await _batch_of(pool, 3)
    await batches.claim_lines(pool, "runner", 1, 60)
    assert await batches.cancel(pool, BATCH, "owner")
    assert not await batches.cancel(pool, BATCH, "someone else")
    assert await batches.claim_lines(pool, "runner", 2, 60) == []  # cancelling: no new line starts

    async def finishing() -> str | None:
        async with pool.acquire() as conn, conn.transaction():
            row = await batches.claim_finishing(conn)
            return None if row is None else str(row["status"])

    assert await finishing() is None  # line 1 still runs
    await batches.line_done(pool, BATCH, 1, (True, "{}"), "runner", (0, 0))
    assert await finishing() == "cancelling"
