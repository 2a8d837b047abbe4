"""Install progress as the reference's `BackendInstallProgressEvent`, debounced (~250 ms, leading edge).

The installer reports from a thread; `ProgressDebouncer.report` hops onto the event loop. The
first report is published at once, later ones at most every `interval_s` (the latest wins), and
`flush()` publishes whatever is still pending when the install ends.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from corral.bus.messages import BackendInstallProgressEvent
from corral.config.sizes import format_size

log = logging.getLogger(__name__)

DEBOUNCE_INTERVAL_S = 0.25


def progress_event(
    op_id: str,
    node_id: str,
    backend: str,
    phase: str,
    file_name: str,
    current: int,
    total: int,
    is_bytes: bool,
) -> BackendInstallProgressEvent:
    def shown(n: int) -> str:
        return format_size(n) if is_bytes else str(n)

    percentage = round(min(100.0, 100.0 * current / total), 1) if total > 0 else 0.0
    return BackendInstallProgressEvent(
        op_id=op_id,
        node_id=node_id,
        backend=backend,
        phase=phase,
        file_name=file_name or None,
        current=shown(current) if current or total else None,
        total=shown(total) if total else None,
        percentage=percentage,
    )


class ProgressDebouncer:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        publish: Callable[[BackendInstallProgressEvent], Awaitable[None]],
        make_event: Callable[[str, str, int, int, bool], BackendInstallProgressEvent],
        interval_s: float = DEBOUNCE_INTERVAL_S,
    ) -> None:
        self.loop = loop
        self.publish = publish
        self.make_event = make_event
        self.interval_s = interval_s
        self._last_sent = 0.0
        self._pending: BackendInstallProgressEvent | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._sends: set[asyncio.Task[None]] = set()

    def report(self, phase: str, file_name: str, current: int, total: int, is_bytes: bool) -> None:
        """Thread-safe entry point for the installer's progress callback."""
        event = self.make_event(phase, file_name, current, total, is_bytes)
        self.loop.call_soon_threadsafe(self._offer, event)

    def _offer(self, event: BackendInstallProgressEvent) -> None:
        now = time.monotonic()
        if self._timer is None and now - self._last_sent >= self.interval_s:
            self._send(event)
            return
        self._pending = event
        if self._timer is None:
            self._timer = self.loop.call_later(self.interval_s - (now - self._last_sent), self._fire)

    def _fire(self) -> None:
        self._timer = None
        if self._pending is not None:
            event, self._pending = self._pending, None
            self._send(event)

    def _send(self, event: BackendInstallProgressEvent) -> None:
        self._last_sent = time.monotonic()
        task = self.loop.create_task(self._publish_quietly(event))
        self._sends.add(task)
        task.add_done_callback(self._sends.discard)

    async def _publish_quietly(self, event: BackendInstallProgressEvent) -> None:
        try:
            await self.publish(event)
        except Exception as exc:  # progress is a hint: a publish failure never fails the install
            log.debug("progress publish failed: %s", exc)

    async def flush(self) -> None:
        """Publish what is pending (the final state) and wait for every send to finish."""
        await asyncio.sleep(0)  # let reports queued with call_soon_threadsafe land first
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._pending is not None:
            event, self._pending = self._pending, None
            self._send(event)
        if self._sends:
            await asyncio.gather(*self._sends, return_exceptions=True)
