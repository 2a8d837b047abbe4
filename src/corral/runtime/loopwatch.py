"""Event-loop stall detector for every corral process (frontend, worker): cheap enough for production.

asyncio's debug mode times every callback but costs far too much on the hot path, and uvloop's
handles cannot be wrapped. Instead one task wakes every `interval` and measures how late it woke:
a wake-up later than the threshold means some callback held the loop that long. It also measures
the loop thread's CPU time over the same window, which tells a callback that computed (GGUF
parsing, hashing: a bug) from a process that was merely not scheduled (a busy machine). A watchdog
thread notices a stall while it is still going on and logs the loop thread's stack, so the
warning names the code that blocked.

Stalls are counted in `corral_event_loop_stalls_total` (served on the frontend's /metrics) and
logged as `event loop stalled for N ms (loop thread on CPU M ms; ...)`; the e2e harness fails a test
whose processes logged a stall with M over the threshold.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
import sys
import threading
import time
import traceback
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from prometheus_client import Counter, Gauge

log = logging.getLogger(__name__)

SLOW_CALLBACK_ENV = "CORRAL_SLOW_CALLBACK_MS"
DEFAULT_SLOW_CALLBACK_MS = 100
STACK_FRAMES = 40  # innermost frames logged (import machinery left out): enough to reach our code
BLOCKED_MARKER = "event loop blocked for over"
STALL_LINE = re.compile(r"event loop stalled for (\d+) ms \(loop thread on CPU (\d+) ms")

STALLS = Counter(
    "corral_event_loop_stalls",
    f"Event-loop stalls longer than the slow-callback threshold (${SLOW_CALLBACK_ENV})",
    ["process"],
)
MAX_STALL = Gauge(
    "corral_event_loop_max_stall_seconds", "Longest event-loop stall since the process started", ["process"]
)

T = TypeVar("T")


@dataclass
class StallStats:
    count: int = 0
    max_s: float = 0.0


class LoopWatch:
    """One per event loop: `start()` on the loop, `stop()` before it closes."""

    def __init__(
        self, process: str, threshold_ms: int = DEFAULT_SLOW_CALLBACK_MS, *, stacks: bool = True
    ) -> None:
        self.process = process
        self.threshold_s = threshold_ms / 1000
        self.interval_s = min(0.025, self.threshold_s / 4)
        self.stats = StallStats()
        self._stacks = stacks
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._halt = threading.Event()
        self._tick_s = time.monotonic()
        self._loop_thread = threading.get_ident()
        STALLS.labels(process)  # exported at 0 from the start, so a scrape sees the series before a stall
        MAX_STALL.labels(process)

    def start(self) -> None:
        self._loop_thread = threading.get_ident()
        self._tick_s = time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._watch(), name="loopwatch")
        if self._stacks:
            self._thread = threading.Thread(target=self._watchdog, name="loopwatch", daemon=True)
            self._thread.start()

    async def stop(self) -> None:
        self._halt.set()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _watch(self) -> None:
        cpu_s = time.thread_time()
        while True:
            expected_s = time.monotonic() + self.interval_s
            await asyncio.sleep(self.interval_s)
            now_s, now_cpu_s = time.monotonic(), time.thread_time()
            self._tick_s = now_s
            late_s = now_s - expected_s
            if late_s >= self.threshold_s:
                self.record(late_s, now_cpu_s - cpu_s)
            cpu_s = now_cpu_s

    def record(self, late_s: float, cpu_s: float) -> None:
        self.stats.count += 1
        self.stats.max_s = max(self.stats.max_s, late_s)
        STALLS.labels(self.process).inc()
        MAX_STALL.labels(self.process).set(self.stats.max_s)
        log.warning(
            "event loop stalled for %d ms (loop thread on CPU %d ms; threshold %d ms, %s)",
            late_s * 1000,
            cpu_s * 1000,
            self.threshold_s * 1000,
            SLOW_CALLBACK_ENV,
        )

    def _watchdog(self) -> None:
        reported_tick = 0.0
        while not self._halt.wait(self.interval_s):
            tick = self._tick_s
            if tick == reported_tick or time.monotonic() - tick < self.threshold_s + self.interval_s:
                continue
            reported_tick = tick
            frame = sys._current_frames().get(self._loop_thread)
            if frame is not None:
                frames = [f for f in traceback.extract_stack(frame) if not f.filename.startswith("<frozen")]
                stack = "".join(traceback.format_list(frames[-STACK_FRAMES:]))
                log.warning("%s %d ms, in:\n%s", BLOCKED_MARKER, self.threshold_s * 1000, stack)


async def watched(main: Coroutine[Any, Any, T], process: str, threshold_ms: int) -> T:
    """Run `main` with a LoopWatch on the current loop (the entry point of a process)."""
    watch = LoopWatch(process, threshold_ms)
    watch.start()
    try:
        return await main
    finally:
        await watch.stop()


def stalls_in_log(text: str, cpu_threshold_ms: int = DEFAULT_SLOW_CALLBACK_MS) -> list[str]:
    """The stalls of a process log where the loop thread itself computed for the threshold or more: each is
    the stall line, preceded by the blocking stack the watchdog logged during it (when it caught one)."""
    found, stack = [], ""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if BLOCKED_MARKER in line:
            frames = itertools.takewhile(lambda x: x.startswith("  "), lines[i + 1 :])
            stack = "\n".join([line, *frames])
        elif (m := STALL_LINE.search(line)) is not None:
            if int(m.group(2)) >= cpu_threshold_ms:
                found.append(f"{stack}\n{line}" if stack else line)
            stack = ""
    return found
