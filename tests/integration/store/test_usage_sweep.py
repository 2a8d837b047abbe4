"""Usage retention on real PostgreSQL: the sweep deletes hourly rows older than CORRAL_USAGE_RETENTION and keeps
the rest, and never the day totals a month's quota reads."""

from __future__ import annotations

import asyncpg

from corral.store import usage as usage_store

DAY_S = 86400.0


async def _row(pool: asyncpg.Pool, model: str, days_ago: int) -> None:
    await pool.execute(
        "INSERT INTO usage (key_id, model, hour, tenant, requests) "
        "VALUES ('k', $1, date_trunc('hour', now()) - make_interval(days => $2), 't', 1)",
        model,
        days_ago,
    )
    await pool.execute(
        "INSERT INTO usage_key_days (key_id, day, tokens) VALUES ($1, current_date - $2::int, 1) "
        "ON CONFLICT DO NOTHING",
        model,
        days_ago,
    )


async def test_rows_past_the_retention_go_and_the_quota_days_stay(pool: asyncpg.Pool) -> None:
    for model, days_ago in (("new", 0), ("month", 20), ("old", 45), ("ancient", 500)):
        await _row(pool, model, days_ago)
    gone = await usage_store.sweep(pool, 30 * DAY_S)
    hourly = {r["model"] for r in await pool.fetch("SELECT model FROM usage")}
    assert hourly == {"new", "month"}
    days = {r["key_id"] for r in await pool.fetch("SELECT key_id FROM usage_key_days")}
    assert days == {
        "new",
        "month",
        "old",
    }  # 62 days of totals stay whatever the retention: the quotas read them
    assert gone == 2 + 1
    assert await usage_store.sweep(pool, 30 * DAY_S) == 0
