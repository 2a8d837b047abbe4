"""The load-job claim against a real PostgreSQL: one owner, orphan takeover, failure grace."""

from __future__ import annotations

import asyncio

import asyncpg

from corral.store import load_jobs


async def test_exactly_one_of_many_concurrent_claims_wins(pool: asyncpg.Pool) -> None:
    results = await asyncio.gather(
        *(load_jobs.claim(pool, "m", f"frontend-{i}", orphan_s=60, failed_grace_s=15) for i in range(20))
    )
    winners = [job.owner_replica for claimed, job in results if claimed and job]
    assert len(winners) == 1
    assert all(job is not None and job.owner_replica == winners[0] for _, job in results)


async def test_an_orphaned_job_is_taken_over_and_the_old_owner_loses_its_heartbeat(
    pool: asyncpg.Pool,
) -> None:
    assert (await load_jobs.claim(pool, "m", "old", orphan_s=60, failed_grace_s=15))[0]
    await pool.execute("UPDATE model_load_jobs SET last_progress = now() - interval '2 minutes'")
    claimed, job = await load_jobs.claim(pool, "m", "new", orphan_s=60, failed_grace_s=15)
    assert claimed and job is not None and job.owner_replica == "new" and job.state == "pending"

    async def beat(owner: str) -> bool:
        return await load_jobs.heartbeat(
            pool,
            "m",
            owner,
            state="staging",
            node_id="n",
            node_name="w",
            replica_index=0,
            bytes_sent=1,
            total_bytes=2,
            file_index=1,
            total_files=1,
            moving=True,
        )

    assert not await beat("old")
    assert await beat("new")


async def test_a_failed_job_blocks_new_claims_only_for_its_grace(pool: asyncpg.Pool) -> None:
    await load_jobs.claim(pool, "m", "a", orphan_s=60, failed_grace_s=15)
    await load_jobs.fail(pool, "m", "a", "loading model m: disk full")
    claimed, job = await load_jobs.claim(pool, "m", "b", orphan_s=60, failed_grace_s=15)
    assert not claimed and job is not None and job.state == "failed" and job.last_error.endswith("disk full")
    await pool.execute("UPDATE model_load_jobs SET updated_at = now() - interval '20 seconds'")
    assert (await load_jobs.claim(pool, "m", "b", orphan_s=60, failed_grace_s=15))[0]
