"""build_frontend (frontend/main.py): a start that fails half way closes what it had started."""

from __future__ import annotations

import asyncio
import gc
import socket
from collections.abc import Callable
from pathlib import Path

import asyncpg
import pytest

from corral.config.frontend import FrontendSettings
from corral.config.settings import load
from corral.frontend.main import build_frontend


async def _sessions(url: str) -> int:
    """Connections to the test database besides the one asking."""
    conn = await asyncpg.connect(url)
    try:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return count
    finally:
        await conn.close()


async def test_a_port_in_use_stops_the_start_and_everything_started_before_it_is_closed(
    make_database: Callable[[], str], nats_url: str, tmp_path: Path
) -> None:
    database_url = make_database()
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    settings = load(
        FrontendSettings,
        "corral run",
        "",
        [
            "--nats-url",
            nats_url,
            "--database-url",
            database_url,
            "--models-path",
            str(tmp_path),
            "--address",
            f"127.0.0.1:{port}",
        ],
        {},
    )
    tasks_before = asyncio.all_tasks()
    gc_was_frozen = gc.get_freeze_count()
    try:
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}"):
            async with build_frontend(settings, asyncio.Event()):
                raise AssertionError("the start should have failed")
    finally:
        taken.close()
    assert gc.get_freeze_count() == gc_was_frozen  # the start stopped before the HTTP server listened
    assert asyncio.all_tasks() == tasks_before  # the router's and the lifecycle's loops ended
    for _ in range(100):  # a closed connection's backend leaves pg_stat_activity as it exits
        if await _sessions(database_url) == 0:
            break
        await asyncio.sleep(0.05)
    assert await _sessions(database_url) == 0  # the pool was closed
