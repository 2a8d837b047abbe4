"""Usage accounting (`usage`, `usage_key_days`): per API key x model x UTC hour counts written in batches by each
frontend's ledger (tenancy/ledger.py), each key's day totals for quotas, and the admin report (GET /api/usage)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from corral.store.queries import q


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One key x model x hour's counts to add (`hour_s`: the hour's start, unix seconds)."""

    key_id: str
    tenant: str
    model: str
    hour_s: int
    requests: int
    prompt: int
    completion: int
    cached: int


async def add(pool: asyncpg.Pool, rows: Sequence[UsageRow], timeout_s: float) -> None:
    """Add `rows` to the stored counts in one statement (all or nothing)."""
    if not rows:
        return
    await pool.execute(
        q("usage_flush"),
        [r.key_id for r in rows],
        [r.tenant for r in rows],
        [r.model for r in rows],
        [r.hour_s for r in rows],
        [r.requests for r in rows],
        [r.prompt for r in rows],
        [r.completion for r in rows],
        [r.cached for r in rows],
        timeout=timeout_s,
    )


@dataclass(frozen=True, slots=True)
class KeyTotals:
    """Every key's tokens (prompt + completion) in one UTC day and the month it is in, as stored."""

    day: dt.date
    month: dt.date  # the month's first day
    day_tokens: dict[str, int]
    month_tokens: dict[str, int]


async def key_totals(pool: asyncpg.Pool, day: dt.date, timeout_s: float) -> KeyTotals:
    month = day.replace(day=1)
    rows = await pool.fetch(q("usage_key_totals"), day, month, timeout=timeout_s)
    return KeyTotals(
        day,
        month,
        {r["key_id"]: int(r["day_tokens"]) for r in rows if r["day_tokens"]},
        {r["key_id"]: int(r["month_tokens"]) for r in rows},
    )


@dataclass(frozen=True, slots=True)
class ReportQuery:
    """Filters (None: any) and grouping of GET /api/usage; rows whose hour starts in [since, until)."""

    since: dt.datetime
    until: dt.datetime
    key_id: str | None = None
    tenant: str | None = None
    model: str | None = None
    by_key: bool = False
    by_tenant: bool = False
    by_model: bool = False
    period: str | None = None  # "hour", "day" or None


async def report(pool: asyncpg.Pool, query: ReportQuery, limit: int) -> list[asyncpg.Record]:
    return list(
        await pool.fetch(
            q("usage_report"),
            query.key_id,
            query.tenant,
            query.model,
            query.since,
            query.until,
            query.by_key,
            query.by_tenant,
            query.by_model,
            query.period,
            limit,
        )
    )


SWEEP_BATCH = 5000  # rows deleted per statement: a long backlog goes in short transactions
QUOTA_DAYS_KEPT_S = 62 * 86400.0  # the day totals a month's quota reads are never swept


async def sweep(pool: asyncpg.Pool, retention_s: float) -> int:
    """Delete the counts older than `retention_s` (CORRAL_USAGE_RETENTION); how many rows went."""
    total = 0
    for name, keep_s in (
        ("usage_sweep", retention_s),
        ("usage_key_days_sweep", max(retention_s, QUOTA_DAYS_KEPT_S)),
    ):
        while True:
            gone = int(await pool.fetchval(q(name), SWEEP_BATCH, keep_s))
            total += gone
            if gone < SWEEP_BATCH:
                break
    return total
