"""Backend logs over NATS: snapshots by request/reply, live lines by publish.

The reference serves `GET /v1/backend-logs[/<model>]` and a WebSocket on the worker's HTTP
address. corral's worker HTTP server is the threaded file server (one thread per connection,
sendfile): a WebSocket held open per follower would pin a thread each and mix a second protocol
into a measured data path. The logs travel over the worker's NATS link instead, which already
carries its authenticated control traffic and reaches workers behind NAT:

* `nodes.<id>.backend.logs` (request/reply): `{"model_id": "", "limit": n}` → `{"models": [...]}`;
  with a model id → `{"lines": [{seq, process_key, timestamp, stream, text}, ...]}` (at most
  `limit` lines and `REPLY_BYTES_MAX` bytes, newest kept).
* `nodes.<id>.backend.logs.<model>.lines` (publish): `{"model_id", "lines": [...]}`, batched every
  `FLUSH_S`. A follower subscribes first, then takes a snapshot, and drops lines whose `seq` (per
  process key) it has already seen.

The frontend proxies both with admin auth (`/api/nodes/<id>/backend-logs…`, `/ws/nodes/<id>/…`).
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from nats.aio.msg import Msg

from corral.bus import subjects
from corral.bus.messages import BackendLogsReply, BackendLogsRequest, ValidationError
from corral.worker.backend_logs import BackendLogs, LogLine

log = logging.getLogger(__name__)

REPLY_BYTES_MAX = 512 * 1024  # well under NATS's default 1 MiB max payload
LIMIT_MAX = 5000
FLUSH_S = 0.1
QUEUE_MAX = 10_000  # lines waiting to be published; the oldest go first when a flood outruns NATS

Handler = Callable[[Msg], Awaitable[None]]


def fit(lines: list[LogLine], budget: int = REPLY_BYTES_MAX) -> list[dict[str, Any]]:
    """The newest lines whose JSON fits in `budget` bytes, oldest first."""
    kept: list[dict[str, Any]] = []
    used = 0
    for line in reversed(lines):
        entry = line.to_dict()
        size = len(json.dumps(entry)) + 1
        if used + size > budget:
            break
        kept.append(entry)
        used += size
    kept.reverse()
    return kept


class LogHandlers:
    """Answers snapshots and publishes live lines; `link` gives the current (connection, node id)."""

    def __init__(self, logs: BackendLogs, link: Callable[[], tuple[Any, str]]) -> None:
        self.logs, self._link = logs, link
        self._queue: collections.deque[tuple[str, LogLine]] = collections.deque(maxlen=QUEUE_MAX)
        self._wake = asyncio.Event()
        logs.listeners.append(self._queued)

    def routes(self, node_id: str) -> dict[str, Handler]:
        return {subjects.backend_logs(node_id): self.snapshot}

    def _queued(self, model_id: str, line: LogLine) -> None:
        self._queue.append((model_id, line))
        self._wake.set()

    async def snapshot(self, msg: Msg) -> None:
        try:
            req = BackendLogsRequest.from_json(msg.data)
        except ValidationError as exc:
            await msg.respond(BackendLogsReply(error=f"invalid request: {exc}").to_json())
            return
        if not req.model_id:
            await msg.respond(BackendLogsReply(models=self.logs.models()).to_json())
            return
        if not self.logs.known(req.model_id):
            await msg.respond(BackendLogsReply(error=f"no backend logs for model {req.model_id!r}").to_json())
            return
        limit = max(0, min(req.limit, LIMIT_MAX))
        await msg.respond(BackendLogsReply(lines=fit(self.logs.lines(req.model_id, limit))).to_json())

    async def run(self, stop: asyncio.Event) -> None:
        """Publish queued lines, batched per model, until `stop`."""
        while not stop.is_set():
            await self._wake.wait()
            self._wake.clear()
            await self._flush()
            await asyncio.sleep(FLUSH_S)

    async def _flush(self) -> None:
        batches: dict[str, list[LogLine]] = collections.defaultdict(list)
        while self._queue:
            model_id, line = self._queue.popleft()
            batches[model_id].append(line)
        nc, node_id = self._link()
        if nc is None or not nc.is_connected:
            return  # nobody can follow without NATS; the snapshot still has the lines
        for model_id, lines in batches.items():
            for start in range(0, len(lines), 200):
                payload = {"model_id": model_id, "lines": fit(lines[start : start + 200])}
                try:
                    await nc.publish(
                        subjects.backend_log_lines(node_id, model_id), json.dumps(payload).encode()
                    )
                except Exception as exc:  # a reconnecting client: live lines are best-effort
                    log.debug("backend log lines not published: %s", exc)
                    return
