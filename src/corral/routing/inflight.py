"""Cluster-wide in-flight counts: each frontend publishes its own on NATS at a short interval.

A report also acknowledges the eviction marks the frontend has applied, so an evictor can prove
that every live frontend stopped routing to a replica and has nothing in flight on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from nats.aio.client import Client
from nats.aio.msg import Msg

from corral.routing.replica import Replica

log = logging.getLogger(__name__)

SUBJECT = "corral.inflight"
REPORT_INTERVAL_S = 0.5
STALE_AFTER_REPORTS = 4  # a frontend silent this long is gone (its requests died with it)


@dataclass
class _Report:
    received_s: float
    counts: dict[str, int]
    acks: set[str] = field(default_factory=set)
    last_used_s: dict[str, float] = field(default_factory=dict)


class ClusterInFlight:
    def __init__(self, nc: Client, frontend_id: str, local: Callable[[], list[Replica]],
                 interval_s: float = REPORT_INTERVAL_S) -> None:
        self.nc, self.frontend_id, self._local, self.interval_s = nc, frontend_id, local, interval_s
        self._remote: dict[str, _Report] = {}
        self._last_used_s: dict[str, float] = {}  # latest use of each replica by any frontend
        self.acks: set[str] = set()  # eviction marks this frontend has applied

    async def start(self) -> None:
        await self.nc.subscribe(SUBJECT, cb=self._on_report)

    def _live(self) -> dict[str, _Report]:
        horizon = time.monotonic() - self.interval_s * STALE_AFTER_REPORTS
        return {fid: r for fid, r in self._remote.items() if r.received_s >= horizon}

    def total(self, replica: Replica) -> int:
        return replica.in_flight + sum(r.counts.get(replica.key, 0) for r in self._live().values())

    def remote_total(self, key: str) -> int:
        return sum(r.counts.get(key, 0) for r in self._live().values())

    def last_used_s(self, key: str) -> float:
        return self._last_used_s.get(key, 0.0)

    def all_acked(self, mark: str) -> bool:
        """Every live peer has applied eviction mark `mark` (so it no longer routes to that replica)."""
        return all(mark in r.acks for r in self._live().values())

    async def _on_report(self, msg: Msg) -> None:
        try:
            body = json.loads(msg.data)
            if body["frontend"] == self.frontend_id:
                return
            report = _Report(time.monotonic(), dict(body["counts"]), set(body["acks"]), dict(body.get("used", {})))
            self._remote[body["frontend"]] = report
            for key, used_s in report.last_used_s.items():
                self._last_used_s[key] = max(used_s, self._last_used_s.get(key, 0.0))
        except (ValueError, KeyError, TypeError):
            log.debug("ignoring malformed in-flight report")

    async def publish_once(self) -> None:
        replicas = self._local()
        counts = {r.key: r.in_flight for r in replicas if r.in_flight}
        used = {r.key: r.last_used_s for r in replicas if r.last_used_s}
        for key, used_s in used.items():
            self._last_used_s[key] = max(used_s, self._last_used_s.get(key, 0.0))
        body = {"frontend": self.frontend_id, "counts": counts, "acks": sorted(self.acks), "used": used}
        await self.nc.publish(SUBJECT, json.dumps(body).encode())

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(Exception):  # a NATS blip: the next report heals it
                await self.publish_once()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval_s)
