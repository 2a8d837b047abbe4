"""A per-backend gate: process starts share it, installs, upgrades and deletes hold it alone.

Starting a process of a backend must not overlap a rename or removal of its directory (an upgrade
would leave it running from a deleted directory), while starts of different models on one backend
run side by side. A waiting exclusive holder blocks new shared ones, so an upgrade is not starved.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class BackendGate:
    def __init__(self) -> None:
        self._cond = asyncio.Condition()
        self._shared = 0
        self._exclusive = False
        self._waiting_exclusive = 0

    @contextlib.asynccontextmanager
    async def shared(self) -> AsyncIterator[None]:
        async with self._cond:
            await self._cond.wait_for(lambda: not self._exclusive and not self._waiting_exclusive)
            self._shared += 1
        try:
            yield
        finally:
            async with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        async with self._cond:
            self._waiting_exclusive += 1
            try:
                await self._cond.wait_for(lambda: not self._exclusive and not self._shared)
            finally:
                self._waiting_exclusive -= 1
            self._exclusive = True
        try:
            yield
        finally:
            async with self._cond:
                self._exclusive = False
                self._cond.notify_all()
