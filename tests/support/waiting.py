"""Poll for a condition in end-to-end tests, with a bound that names what was awaited."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def wait_for_async(predicate: Callable[[], Awaitable[bool]], what: str, timeout_s: float) -> None:
    """`wait_for` inside an event loop, for a predicate that awaits (a database read)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
