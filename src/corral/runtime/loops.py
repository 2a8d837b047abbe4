"""Periodic background loops and the tasks a process owns: one policy for the whole project.

`run_periodic` runs a body every interval until a stop event is set. An exception of any type
is logged with the loop's name and the loop backs off (exponentially, with jitter) and goes on:
a loop never dies silently on an error its author did not foresee. `backoff_s` is the project's
one retry-delay policy. `OwnedTasks` is what a process's `main` holds: it names every long-lived
task, notices one that ends while the process is meant to run, and says which one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

BACKOFF_CAP_S = 30.0  # the longest pause after repeated failures of a loop's body
STOP_TIMEOUT_S = 5.0


def run_fast(main: Coroutine[Any, Any, T]) -> T:
    """Run a process's `main` on uvloop when it is installed (the frontend's and backends' event loop: a read, a
    write and a callback cost less in C), else on asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def backoff_s(
    failures: int,
    first_s: float,
    max_s: float,
    *,
    jitter: float = 0.0,
    rand: Callable[[], float] = random.random,
) -> float:
    """The pause after `failures` consecutive failures: `first_s` doubling up to `max_s` (0 for none).

    `jitter` (0–1) takes a random fraction up to that much off the pause, so a fleet that failed
    together does not retry together.
    """
    if failures <= 0:
        return 0.0
    delay_s = min(first_s * 2.0 ** min(failures - 1, 62), max_s)
    return delay_s * (1.0 - jitter * rand())


async def wait_or_stop(stop: asyncio.Event, timeout_s: float, wake: asyncio.Event | None = None) -> bool:
    """Sleep up to `timeout_s`, ending early on `stop` (or `wake`); True when `stop` is set."""
    events = [stop] if wake is None else [stop, wake]
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=max(0.0, timeout_s), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
    return stop.is_set()


async def done_before_stop(future: asyncio.Future[Any], stop: asyncio.Event) -> bool:
    """Wait for `future` or `stop`, whichever comes first; True when `future` is done (it is left as it is)."""
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([future, stopping], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    return future.done()


async def run_periodic(
    name: str,
    body: Callable[[], Awaitable[object]],
    interval_s: float,
    stop: asyncio.Event,
    *,
    wake: asyncio.Event | None = None,
    delay_first: bool = False,
    backoff_cap_s: float = BACKOFF_CAP_S,
) -> None:
    """Run `body` every `interval_s` until `stop`; on any exception log it, back off and continue.

    `wake` (set by anyone) starts the next run at once; `delay_first` waits one interval before the
    first run. After failures the pause grows from `interval_s` up to max(interval_s, backoff_cap_s).
    """
    failures = 0
    if delay_first and await wait_or_stop(stop, interval_s, wake):
        return
    while not stop.is_set():
        if wake is not None:
            wake.clear()
        try:
            await body()
        except Exception as exc:  # any type: the loop must outlive what its body did not foresee
            failures += 1
            pause_s = backoff_s(failures, interval_s, max(interval_s, backoff_cap_s), jitter=0.2)
            log.warning(
                "%s: pass failed (%d in a row; next try in %.1fs): %s: %s",
                name,
                failures,
                pause_s,
                type(exc).__name__,
                exc,
                exc_info=failures == 1,
            )
        else:
            if failures:
                log.info("%s: recovered after %d failed pass(es)", name, failures)
            failures, pause_s = 0, interval_s
        if await wait_or_stop(stop, pause_s, wake):
            return


class OwnedTasks:
    """The long-lived tasks of one process, by name. `until_stop` returns when the process should end."""

    def __init__(self) -> None:
        self.tasks: list[asyncio.Task[Any]] = []  # every task watched
        self._started: list[
            asyncio.Task[Any]
        ] = []  # the ones `close` ends (adopted ones end with their owner)

    def start(self, name: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=name)
        self.tasks.append(task)
        self._started.append(task)
        return task

    def adopt(self, tasks: list[asyncio.Task[Any]]) -> None:
        """Watch tasks a component started and stops itself (they keep their names)."""
        self.tasks.extend(tasks)

    async def until_stop(self, stop: asyncio.Event) -> str | None:
        """Wait for `stop` or for a task to end; None on `stop`, else why the process must exit."""
        stopper = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({stopper, *self.tasks}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
        if stop.is_set():
            return None
        ended = next(t for t in self.tasks if t.done())
        if ended.cancelled():
            return f"background task {ended.get_name()} was cancelled"
        exc = ended.exception()
        if exc is not None:
            return f"background task {ended.get_name()} died: {type(exc).__name__}: {exc}"
        return f"background task {ended.get_name()} ended unexpectedly"

    async def close(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Give the started tasks `timeout_s` to end on their stop event, then cancel what is left."""
        pending = [t for t in self._started if not t.done()]
        if pending:
            _done, late = await asyncio.wait(pending, timeout=timeout_s)
            for task in late:
                task.cancel()
            with contextlib.suppress(Exception):
                await asyncio.gather(*late, return_exceptions=True)
