"""Admission of engine calls in a backend process: up to `capacity` at once, in arrival order; some exclusive.

An engine serves `parallel` calls at once (llama.cpp slots, the simulator's `parallel:<n>`; 1 for most engines,
which is the one lock the servicer had before). LoadModel and Free are exclusive: they wait for every call to
end and keep new ones out. Callers are admitted strictly first come, first served (a call never overtakes an
earlier one, so an exclusive call cannot be starved by a stream of small ones). A caller cancelled while waiting
leaves the queue; one cancelled just after being admitted gives its place back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator


class Admission:
    def __init__(self, capacity: int = 1) -> None:
        self._capacity = max(1, capacity)
        self.running = 0  # admitted shared calls not yet ended
        self._exclusive = False
        self._queue: deque[tuple[bool, asyncio.Future[None]]] = deque()

    @property
    def capacity(self) -> int:
        return self._capacity

    @capacity.setter
    def capacity(self, value: int) -> None:
        """Change how many calls run at once (when the engine loaded a model); waiters are admitted if now room."""
        self._capacity = max(1, value)
        self._wake()

    @property
    def waiting(self) -> int:
        return sum(1 for _, future in self._queue if not future.done())

    def full(self) -> bool:
        """No call could start now: every slot is taken, or an exclusive call runs."""
        return self._exclusive or self.running >= self._capacity

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """One of the `capacity` places, for an engine call."""
        await self.enter(exclusive=False)
        try:
            yield
        finally:
            self.leave(exclusive=False)

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """Every place: waits for the calls running to end, and no call starts until this ends."""
        await self.enter(exclusive=True)
        try:
            yield
        finally:
            self.leave(exclusive=True)

    def _fits(self, exclusive: bool) -> bool:
        if self._exclusive:
            return False
        return self.running == 0 if exclusive else self.running < self._capacity

    def _take(self, exclusive: bool) -> None:
        if exclusive:
            self._exclusive = True
        else:
            self.running += 1

    def leave(self, exclusive: bool = False) -> None:
        if exclusive:
            self._exclusive = False
        else:
            self.running -= 1
        self._wake()

    async def enter(self, exclusive: bool = False) -> None:
        """Take a place (every place, `exclusive`), waiting for it in arrival order; `leave` gives it back. `slot`
        and `exclusive` are the same as context managers (the servicer's unary call spells them out: a context
        manager costs a couple of microseconds a call)."""
        if self._fits(exclusive) and not any(not future.done() for _, future in self._queue):
            self._take(exclusive)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((exclusive, future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():  # admitted, then cancelled before it ran
                self.leave(exclusive)
            else:
                self._wake()  # it may have held up the ones behind it
            raise

    def _wake(self) -> None:
        """Admit from the head of the queue while the head fits (first come, first served)."""
        while self._queue:
            exclusive, future = self._queue[0]
            if future.done():  # cancelled while waiting
                self._queue.popleft()
                continue
            if not self._fits(exclusive):
                return
            self._queue.popleft()
            self._take(exclusive)
            future.set_result(None)
