"""Fixtures of the integration tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import asyncpg
import pytest

from corral.store import db


@pytest.fixture
async def pool(make_database: Callable[[], str]) -> AsyncIterator[asyncpg.Pool]:
    """A pool on a fresh, migrated throwaway database (room for concurrent-claim tests)."""
    pool = await db.connect(make_database(), max_size=20)
    await db.migrate(pool)
    yield pool
    await pool.close()
