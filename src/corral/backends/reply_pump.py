"""Stream an engine's replies with one thread per generation, coalescing what piles up.

The engine's call and its blocking iterator run in one thread (not one thread hop per token, nor one to start the
call and another to iterate it: each hop costs the first token a wake-up of the loop); the event loop
takes whatever replies are ready at once. When the reader (gRPC flow control, a slow frontend or
client) is slower than the engine, the text pieces that piled up go out as one Reply, so a relay
pays per message, not per token; when the reader keeps up, every token is its own message and no
latency is added.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator

from corral.proto import backend_pb2 as pb
from corral.proto.replies import merge_text_runs

COALESCE_ENV = "CORRAL_STREAM_COALESCE_MAX"  # set on the worker; 1 = one message per token, as the reference


def _max_pieces() -> int:
    try:
        return max(1, int(os.environ.get(COALESCE_ENV, "") or 256))
    except ValueError:
        return 256


MAX_PIECES_PER_REPLY = _max_pieces()  # a cap on one coalesced message (tokens are a few bytes each)


def coalesce(replies: Iterable[pb.Reply]) -> list[pb.Reply]:
    """Merge runs of consecutive text pieces (in order), at most MAX_PIECES_PER_REPLY per message."""
    return merge_text_runs(replies, MAX_PIECES_PER_REPLY)


class ReplyPump:
    """`run()` (in a thread) starts the generation (`start()`: the engine's call, which may check and refuse the
    request, raising) and drains its iterator; `take()` (on the loop) returns every reply ready."""

    def __init__(self, start: Callable[[], Iterator[pb.Reply]], loop: asyncio.AbstractEventLoop) -> None:
        self._start, self._loop = start, loop
        self._ready: deque[pb.Reply] = deque()
        self._lock = threading.Lock()
        self._waiter: asyncio.Future[None] | None = None
        self._stopped = threading.Event()
        self._done = False
        self._error: BaseException | None = None
        self.produced = 0

    def stop(self) -> None:
        """Stop at the next reply (the caller went away)."""
        self._stopped.set()

    def run(self) -> None:
        replies: Iterator[pb.Reply] | None = None
        try:
            replies = self._start()
            for reply in replies:
                with self._lock:
                    self._ready.append(reply)
                    self.produced += 1
                    self._wake()
                if self._stopped.is_set():
                    break
        except BaseException as exc:
            self._error = exc
        finally:
            close = getattr(replies, "close", None)
            if close is not None:
                close()
            with self._lock:
                self._done = True
                self._wake()

    def _wake(self) -> None:  # under the lock
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            self._loop.call_soon_threadsafe(_resolve, waiter)

    async def take(self) -> list[pb.Reply] | None:
        """Every reply ready now (waiting for at least one); None at the end. Raises the engine's error."""
        while True:
            with self._lock:
                if self._ready:
                    batch = list(self._ready)
                    self._ready.clear()
                    return batch
                if self._done:
                    if self._error is not None:
                        raise self._error
                    return None
                waiter = self._waiter = self._loop.create_future()
            await waiter


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
