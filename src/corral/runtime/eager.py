"""Start a coroutine in the caller's turn of the loop, and make a task only if it waits (Python 3.12's eager tasks,
for 3.11).

The backend's fast lane (corral/lane/server.py) runs each call as a coroutine; a call to an engine that answers
without waiting (the simulator, or any engine whose `blocks` is False) then finishes in the frame's own callback:
no task, no scheduled step, no done callback (a uvloop task measured ~7 µs a call here).
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Coroutine, Generator
from typing import Any


def start(coro: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
    """Run `coro` until it first waits: None when it finished first (nothing was scheduled), else the task that
    runs the rest of it, as `asyncio.ensure_future(coro)` would have. What it raises before it waits is raised
    here, in the caller's frame."""
    try:
        waiting = coro.send(None)
    except StopIteration:
        return None
    return asyncio.ensure_future(_rest(coro, waiting))


@types.coroutine
def _rest(coro: Coroutine[Any, Any, None], waiting: Any) -> Generator[Any, Any, None]:
    """The rest of `coro`, which waits on `waiting` (what its last step yielded): each value the task sends and
    each exception it throws (a cancellation) goes on to `coro`, as if the task had run it from the start."""
    while True:
        try:
            sent = yield waiting
        except BaseException as exc:
            try:
                waiting = coro.throw(exc)
            except StopIteration:
                return
        else:
            try:
                waiting = coro.send(sent)
            except StopIteration:
                return
