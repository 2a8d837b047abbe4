"""Stored responses of the Responses API (`responses`): each kept for a bounded time, visible only to the API
key that created it (`owner`: the key's sha256, '' without a key). Bodies and conversations travel as JSON
text, encoded and decoded by the caller (orjson), never by asyncpg's codecs."""

from __future__ import annotations

import asyncpg

from corral.store.queries import delete_in_batches, q

SWEEP_BATCH = 1000  # expired rows deleted per statement: a long backlog goes in short transactions


def sweep_interval_s(ttl_s: float) -> float:
    """How often a frontend deletes expired responses: every minute, more often for a retention under two
    (an expired response is never served anyway: every read checks `expires_at`)."""
    return min(60.0, max(1.0, ttl_s / 2))


async def insert(
    pool: asyncpg.Pool, response_id: str, owner: str, body: str, input_items: str, messages: str, ttl_s: float
) -> None:
    await pool.execute(q("response_insert"), response_id, owner, body, input_items, messages, ttl_s)


async def body(pool: asyncpg.Pool, response_id: str, owner: str) -> str | None:
    """The response object as JSON text; None when unknown, expired or another key's."""
    return await pool.fetchval(q("response_body"), response_id, owner)  # type: ignore[no-any-return]


async def input_items(pool: asyncpg.Pool, response_id: str, owner: str) -> str | None:
    """The request's input items as a JSON list; None as `body`."""
    return await pool.fetchval(q("response_input_items"), response_id, owner)  # type: ignore[no-any-return]


async def messages(pool: asyncpg.Pool, response_id: str, owner: str) -> str | None:
    """The conversation up to and including the response, as a JSON list of chat messages; None as `body`."""
    return await pool.fetchval(q("response_messages"), response_id, owner)  # type: ignore[no-any-return]


async def delete(pool: asyncpg.Pool, response_id: str, owner: str) -> bool:
    return await pool.fetchval(q("response_delete"), response_id, owner) is not None


async def sweep(pool: asyncpg.Pool) -> int:
    """Delete every expired response; returns how many."""
    return await delete_in_batches(pool, "responses_sweep", SWEEP_BATCH)
