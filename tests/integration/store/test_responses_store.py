"""Stored responses (the Responses API) against a real PostgreSQL: per-key visibility, retention, the sweep."""

from __future__ import annotations

import asyncpg
import pytest

from corral.store import responses


async def _ids(pool: asyncpg.Pool) -> set[str]:
    return {row["id"] for row in await pool.fetch("SELECT id FROM responses")}


async def test_a_response_is_read_and_deleted_only_with_the_key_that_stored_it(pool: asyncpg.Pool) -> None:
    await responses.insert(
        pool,
        "resp_a",
        "owner-1",
        '{"id": "resp_a"}',
        '[{"id": "msg_1"}]',
        '[{"role": "user", "content": "a\\u0000"}]',
        3600,
    )
    assert await responses.body(pool, "resp_a", "owner-1") == '{"id": "resp_a"}'
    assert await responses.messages(pool, "resp_a", "owner-1") == '[{"role": "user", "content": "a\\u0000"}]'
    assert await responses.input_items(pool, "resp_a", "owner-1") == '[{"id": "msg_1"}]'
    assert await responses.input_items(pool, "resp_a", "owner-2") is None
    assert await responses.body(pool, "resp_a", "owner-2") is None
    assert await responses.body(pool, "resp_a", "") is None
    assert not await responses.delete(pool, "resp_a", "owner-2")
    assert await responses.delete(pool, "resp_a", "owner-1")
    assert await responses.body(pool, "resp_a", "owner-1") is None
    assert not await responses.delete(pool, "resp_a", "owner-1")


async def test_an_expired_response_is_never_served_and_the_sweep_deletes_only_expired_ones(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    await responses.insert(pool, "resp_live", "", "{}", "[]", "[]", 3600)
    for i in range(5):
        await responses.insert(pool, f"resp_old{i}", "", "{}", "[]", "[]", 3600)
    await pool.execute(
        "UPDATE responses SET expires_at = now() - interval '1 second' WHERE id LIKE 'resp_old%'"
    )
    assert await responses.body(pool, "resp_old0", "") is None  # past its time: gone before any sweep
    assert await responses.messages(pool, "resp_old0", "") is None
    assert await responses.input_items(pool, "resp_old0", "") is None
    assert not await responses.delete(pool, "resp_old0", "")
    monkeypatch.setattr(responses, "SWEEP_BATCH", 2)  # a backlog goes in several statements
    assert await responses.sweep(pool) == 5
    assert await _ids(pool) == {"resp_live"}
    assert await responses.sweep(pool) == 0


def test_the_sweep_runs_every_minute_or_more_often_for_a_short_retention() -> None:
    assert responses.sweep_interval_s(30 * 86400) == 60.0
    assert responses.sweep_interval_s(10) == 5.0
    assert responses.sweep_interval_s(0.5) == 1.0
