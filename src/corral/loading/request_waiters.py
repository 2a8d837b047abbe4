"""Requests waiting for a model's load, on this frontend: woken by a NATS event, with a polling fallback.

The job's owner (on any frontend) publishes `corral.load.<model>` when the load ends; every
frontend wakes its local waiters. A missed event costs at most one poll interval: the poll reads
the job row (gone ⇒ finished, `failed` ⇒ the real cause, silent past the orphan window ⇒ take over).
An event from the bus is only a hint to read the row at once (anyone on the bus can publish one):
the outcome a waiter acts on is the job row's, or the owner's own when the job ran in this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

import asyncpg
from nats.aio.client import Client
from nats.aio.msg import Msg

from corral.bus.subjects import token
from corral.loading.job_progress import FAILED
from corral.store import load_jobs

log = logging.getLogger(__name__)

EVENT_SUBJECT_PREFIX = "corral.load"
POLL_INTERVAL_S = 2.0


def event_subject(key: str) -> str:
    return f"{EVENT_SUBJECT_PREFIX}.{token(key)}"


@dataclass(frozen=True)
class Outcome:
    ok: bool
    error: str = ""
    orphaned: bool = False
    kind: str = ""  # of a failure: "placement" (no node fits) or "load"
    hint: bool = False  # from the bus: read the job row before believing anything


HINT = Outcome(ok=False, hint=True)


class Waiters:
    def __init__(
        self, pool: asyncpg.Pool, nc: Client, *, orphan_s: float, poll_s: float = POLL_INTERVAL_S
    ) -> None:
        self.pool, self.nc, self.orphan_s, self.poll_s = pool, nc, orphan_s, poll_s
        self._waiting: dict[str, set[asyncio.Future[Outcome]]] = defaultdict(set)

    async def start(self) -> None:
        await self.nc.subscribe(f"{EVENT_SUBJECT_PREFIX}.*", cb=self._on_event)

    async def _on_event(self, msg: Msg) -> None:
        try:
            body = json.loads(msg.data)
            self.notify(str(body["tracking_key"]), HINT)  # a hint: the waiter reads the job row now
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring malformed load event on %s", msg.subject)

    async def announce(self, key: str, outcome: Outcome) -> None:
        """Wake local waiters at once and every other frontend's through NATS."""
        self.notify(key, outcome)
        payload = {
            "tracking_key": key,
            "ok": outcome.ok,
            "error": outcome.error or None,
            "kind": outcome.kind,
        }
        with contextlib.suppress(Exception):  # peers fall back to polling the job row
            await self.nc.publish(event_subject(key), json.dumps(payload).encode())

    def notify(self, key: str, outcome: Outcome) -> None:
        for future in self._waiting.get(key, ()):
            if not future.done():
                future.set_result(outcome)

    @contextlib.contextmanager
    def register(self, key: str) -> Iterator[asyncio.Future[Outcome]]:
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._waiting[key].add(future)
        try:
            yield future
        finally:
            self._waiting[key].discard(future)
            if not self._waiting[key]:
                del self._waiting[key]

    async def wait(self, future: asyncio.Future[Outcome], key: str, budget_s: float | None) -> Outcome | None:
        """The load's outcome, or None when the budget ran out first (None budget ⇒ no bound)."""
        loop = asyncio.get_running_loop()
        deadline = None if budget_s is None else loop.time() + budget_s
        rearmed: list[asyncio.Future[Outcome]] = []
        try:
            while True:
                remaining = self.poll_s if deadline is None else min(self.poll_s, deadline - loop.time())
                if remaining <= 0:
                    return None
                await asyncio.wait({future}, timeout=remaining)
                if future.done() and not future.result().hint:
                    return future.result()  # the owner's own outcome, in this process
                outcome = await self._read_row(key)
                if outcome is not None:
                    return outcome
                if future.done():  # a hint the row does not bear out (a forged or early event): keep waiting
                    future = loop.create_future()
                    self._waiting[key].add(future)
                    rearmed.append(future)
        finally:
            for extra in rearmed:
                self._waiting.get(key, set()).discard(extra)

    async def _read_row(self, key: str) -> Outcome | None:
        job = await load_jobs.get(self.pool, key)
        if job is None:
            return Outcome(ok=True)
        if job.state == FAILED:
            return Outcome(ok=False, error=job.last_error, kind=job.error_kind)
        if job.silent_s > self.orphan_s:
            return Outcome(ok=False, orphaned=True)
        return None
