"""The usage ledger against a real PostgreSQL: batched flushes, a database that goes away and comes back, the
flush at close, the quota totals re-read, and GET /api/usage (filters, grouping, 400s)."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import httpx
import pytest
from fastapi import FastAPI
from prometheus_client import REGISTRY

from corral.frontend.admin.usage import build_usage_router
from corral.frontend.errors import install_handlers
from corral.frontend.state import FrontendState
from corral.store import db
from corral.tenancy.caller import ANONYMOUS, Caller
from corral.tenancy.ledger import UsageLedger, day_start_s
from corral.tenancy.usage import Counts

ALICE = Caller(tenant="team-a", key_id="11111111-1111-1111-1111-111111111111")
BOB = Caller(tenant="team-b", key_id="22222222-2222-2222-2222-222222222222")
H10 = dt.datetime(2026, 12, 4, 10, tzinfo=dt.UTC)
H11 = H10 + dt.timedelta(hours=1)


class Clock:
    def __init__(self, at: dt.datetime) -> None:
        self.at_s = at.timestamp()

    def __call__(self) -> float:
        return self.at_s


def _sample(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def _ledger(pool: asyncpg.Pool, clock: Clock, max_pending: int = 1000) -> UsageLedger:
    return UsageLedger(pool, flush_interval_s=3600.0, max_pending=max_pending, clock=clock)


async def _rows(pool: asyncpg.Pool) -> list[tuple[Any, ...]]:
    rows = await pool.fetch(
        "SELECT key_id, tenant, model, hour, requests, prompt_tokens, completion_tokens, cached_tokens "
        "FROM usage ORDER BY hour, key_id, model"
    )
    return [tuple(r) for r in rows]


async def test_recorded_calls_are_written_in_one_flush_exactly_per_key_model_and_hour(
    pool: asyncpg.Pool,
) -> None:
    clock = Clock(H10 + dt.timedelta(minutes=59))
    ledger = _ledger(pool, clock)
    for i in range(50):
        ledger.record(ALICE, "llama", Counts(10 + i, i, i % 3))
    ledger.record(BOB, "llama", Counts(7, 8, 0))
    ledger.record(ANONYMOUS, "qwen", Counts(1, 2, 0))
    clock.at_s = H11.timestamp()
    ledger.record(ALICE, "llama", Counts(4, 4, 4))
    await ledger.flush()
    assert ledger.pending_rows == 0
    alice_prompt = sum(10 + i for i in range(50))
    alice_completion, alice_cached = sum(range(50)), sum(i % 3 for i in range(50))
    assert await _rows(pool) == [
        ("", "anonymous", "qwen", H10, 1, 1, 2, 0),
        (ALICE.key_id, "team-a", "llama", H10, 50, alice_prompt, alice_completion, alice_cached),
        (BOB.key_id, "team-b", "llama", H10, 1, 7, 8, 0),
        (ALICE.key_id, "team-a", "llama", H11, 1, 4, 4, 4),
    ]
    ledger.record(ALICE, "llama", Counts(1, 1, 1))  # a second flush adds to the stored row
    await ledger.flush()
    assert (await _rows(pool))[-1] == (ALICE.key_id, "team-a", "llama", H11, 2, 5, 5, 5)
    # the quota totals were re-read after the flush: day and month of every key, nothing pending any more
    alice_tokens = alice_prompt + alice_completion + 8 + 2
    assert ledger.tokens_used(ALICE.key_id, day_start_s(dt.date(2026, 12, 4))) == alice_tokens
    assert ledger.tokens_used(ALICE.key_id, day_start_s(dt.date(2026, 12, 1))) == alice_tokens
    assert ledger.tokens_used(BOB.key_id, day_start_s(dt.date(2026, 12, 4))) == 15


async def test_another_frontends_flushed_usage_reaches_this_ones_totals_at_its_next_flush(
    pool: asyncpg.Pool,
) -> None:
    clock = Clock(H10)
    here, there = _ledger(pool, clock), _ledger(pool, clock)
    today = day_start_s(dt.date(2026, 12, 4))
    there.record(ALICE, "llama", Counts(100, 50, 0))
    await there.flush()
    assert here.tokens_used(ALICE.key_id, today) == 0  # not re-read yet: the stated drift
    here.record(ALICE, "llama", Counts(1, 1, 0))
    assert here.tokens_used(ALICE.key_id, today) == 2
    await here.flush()
    assert here.tokens_used(ALICE.key_id, today) == 152


async def test_a_flush_while_the_database_is_gone_keeps_every_count_for_the_next_one(
    make_database: Callable[[], str], pg_admin_url: str
) -> None:
    url = make_database()
    name = url.rsplit("/", 1)[1]
    pool = await db.connect(url)
    try:
        await db.migrate(pool)
        ledger = _ledger(pool, Clock(H10))
        ledger.record(ALICE, "llama", Counts(10, 20, 5))
        failures = _sample("corral_usage_flush_failures_total")
        admin = await asyncpg.connect(pg_admin_url)
        try:
            await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')  # PostgreSQL loses the database
            with pytest.raises((OSError, asyncpg.PostgresError, asyncpg.InterfaceError)):
                await ledger.flush()
            assert _sample("corral_usage_flush_failures_total") == failures + 1
            assert ledger.pending_rows == 1
            assert ledger.tokens_used(ALICE.key_id, day_start_s(dt.date(2026, 12, 4))) == 30  # still counted
            ledger.record(ALICE, "llama", Counts(1, 2, 3))  # counted during the outage
            await admin.execute(f'CREATE DATABASE "{name}"')  # it comes back (empty, migrated again)
        finally:
            await admin.close()
        await db.migrate(pool)
        await ledger.flush()
        assert await _rows(pool) == [(ALICE.key_id, "team-a", "llama", H10, 2, 11, 22, 8)]
    finally:
        await pool.close()


async def test_past_the_pending_bound_during_an_outage_the_oldest_rows_are_dropped_and_counted(
    pool: asyncpg.Pool,
) -> None:
    ledger = _ledger(pool, Clock(H10), max_pending=2)
    dropped = _sample("corral_usage_dropped_rows_total")
    for model in ("a", "b", "c"):
        ledger.record(ALICE, model, Counts(1, 1, 0))
    assert _sample("corral_usage_dropped_rows_total") == dropped + 1
    await ledger.flush()
    assert [row[2] for row in await _rows(pool)] == ["b", "c"]


async def test_closing_the_ledger_writes_what_is_pending(pool: asyncpg.Pool) -> None:
    async with _ledger(pool, Clock(H10)) as ledger:
        ledger.record(BOB, "llama", Counts(3, 4, 1))
        assert await _rows(pool) == []  # an hour's interval: nothing flushed yet
    assert await _rows(pool) == [(BOB.key_id, "team-b", "llama", H10, 1, 3, 4, 1)]


@pytest.fixture
async def api(pool: asyncpg.Pool) -> AsyncIterator[httpx.AsyncClient]:
    none: Any = None
    clock = Clock(H10)
    ledger = _ledger(pool, clock)
    state = FrontendState(
        pool=pool,
        nc=none,
        router=none,
        configs={},
        registration_token="",
        auto_approve_nodes=True,
        usage=ledger,
    )
    await pool.execute(
        "INSERT INTO api_keys (id, name, role, key_hash) VALUES ($1, 'alice key', 'user', 'h1')", ALICE.key_id
    )
    for hour, caller, model, counts in [
        (H10, ALICE, "llama", Counts(10, 1, 0)),
        (H10, ALICE, "qwen", Counts(20, 2, 0)),
        (H10, BOB, "llama", Counts(30, 3, 0)),
        (H11, ALICE, "llama", Counts(40, 4, 4)),
        (H11, ANONYMOUS, "llama", Counts(50, 5, 0)),
    ]:
        clock.at_s = hour.timestamp()
        ledger.record(caller, model, counts)
    await ledger.flush()
    app = FastAPI()
    install_handlers(app)
    app.include_router(build_usage_router(state))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://frontend"
    ) as client:
        yield client


SINCE = {"since": "2026-12-04T00:00:00Z"}


async def test_the_usage_api_groups_by_key_with_the_keys_name(api: httpx.AsyncClient) -> None:
    body = (await api.get("/api/usage", params={**SINCE, "group_by": "key"})).json()
    assert body["group_by"] == ["key"] and body["truncated"] is False
    assert body["usage"] == [
        {"key_id": "", "key_name": None, **_counts(1, 50, 5, 0)},
        {"key_id": ALICE.key_id, "key_name": "alice key", **_counts(3, 70, 7, 4)},
        {"key_id": BOB.key_id, "key_name": None, **_counts(1, 30, 3, 0)},
    ]


async def test_the_usage_api_filters_and_groups_by_hour_day_tenant_and_model(api: httpx.AsyncClient) -> None:
    by_hour = (await api.get("/api/usage", params={**SINCE, "group_by": "hour", "model": "llama"})).json()
    assert by_hour["usage"] == [
        {"hour": "2026-12-04T10:00:00+00:00", **_counts(2, 40, 4, 0)},
        {"hour": "2026-12-04T11:00:00+00:00", **_counts(2, 90, 9, 4)},
    ]
    by_day = (await api.get("/api/usage", params={**SINCE, "group_by": "day,tenant"})).json()
    assert by_day["usage"] == [
        {"day": "2026-12-04T00:00:00+00:00", "tenant": "anonymous", **_counts(1, 50, 5, 0)},
        {"day": "2026-12-04T00:00:00+00:00", "tenant": "team-a", **_counts(3, 70, 7, 4)},
        {"day": "2026-12-04T00:00:00+00:00", "tenant": "team-b", **_counts(1, 30, 3, 0)},
    ]
    unix_window = {"since": str(H11.timestamp()), "until": str((H11 + dt.timedelta(hours=1)).timestamp())}
    one_key = (
        await api.get("/api/usage", params={**unix_window, "key": ALICE.key_id, "group_by": "model"})
    ).json()
    assert one_key["usage"] == [{"model": "llama", **_counts(1, 40, 4, 4)}]
    anonymous = (await api.get("/api/usage", params={**SINCE, "key": "", "group_by": "tenant"})).json()
    assert anonymous["usage"] == [{"tenant": "anonymous", **_counts(1, 50, 5, 0)}]
    raw = (await api.get("/api/usage", params={**SINCE, "tenant": "team-a", "limit": "2"})).json()
    assert len(raw["usage"]) == 2 and raw["truncated"] is True
    assert set(raw["usage"][0]) == {"hour", "key_id", "key_name", "model", *_counts(0, 0, 0, 0)}


def _counts(requests: int, prompt: int, completion: int, cached: int) -> dict[str, int]:
    return {
        "requests": requests,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "cached_tokens": cached,
        "total_tokens": prompt + completion,
    }


@pytest.mark.parametrize(
    "params, param, message",
    [
        ({"since": "yesterday"}, "since", "since 'yesterday' is not a time: give RFC 3339"),
        ({"until": "2026-12-04T10:00:00"}, "until", "until '2026-12-04T10:00:00' has no time zone"),
        ({"since": "1e300"}, "since", "since '1e300' is not a time"),
        (
            {"since": "2026-12-04T10:00:00Z", "until": "2026-12-04T09:00:00Z"},
            "until",
            "until must be after since",
        ),
        ({"group_by": "hour,week"}, "group_by", "group_by 'week' is unknown"),
        ({"group_by": "hour,day"}, "group_by", "group_by takes hour or day, not both"),
        ({"limit": "0"}, "limit", "limit must be an integer from 1 to 10000"),
        ({"limit": "many"}, "limit", "limit must be an integer from 1 to 10000"),
        ({"modle": "llama"}, "modle", "unknown parameter 'modle'"),  # a typo is refused, not ignored
        ({"model": "x" * 300}, "model", "model is longer than 255 characters"),
    ],
)
async def test_the_usage_api_answers_a_bad_parameter_with_400_naming_it(
    api: httpx.AsyncClient, params: dict[str, str], param: str, message: str
) -> None:
    response = await api.get("/api/usage", params=params)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param and error["message"].startswith(message), error


async def test_the_usage_api_refuses_a_repeated_parameter(api: httpx.AsyncClient) -> None:
    response = await api.get("/api/usage?model=a&model=b")
    assert response.status_code == 400 and response.json()["error"]["param"] == "model"
