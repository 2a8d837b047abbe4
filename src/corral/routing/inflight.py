"""Cluster-wide in-flight counts: each frontend publishes its own on NATS at a short interval.

A report also acknowledges the eviction marks the frontend has applied, so an evictor can prove
that every live frontend stopped routing to a replica and has nothing in flight on it. Both sets
are bounded: an ack is reported for ACK_TTL_S (longer than any wait for it), and a peer silent
for PEER_FORGET_S is dropped (it is already ignored after STALE_AFTER_REPORTS intervals).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from nats.aio.client import Client
from nats.aio.msg import Msg

from corral.routing.replica import Replica
from corral.runtime.loops import run_periodic

log = logging.getLogger(__name__)

SUBJECT = "corral.inflight"
REPORT_INTERVAL_S = 0.5
STALE_AFTER_REPORTS = 4  # a frontend silent this long is gone (its requests died with it)
ACK_TTL_S = 120.0  # longer than every wait for acks (eviction drain 30 s, config edits 10 s)
PEER_FORGET_S = 60.0
LAST_USE_KEEP_S = 24 * 3600.0  # a replica unused this long is simply idle: its entry goes


class AckSet:
    """Eviction / config marks this frontend has applied, each kept for `ttl_s` after it was added."""

    def __init__(self, ttl_s: float = ACK_TTL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s, self._clock = ttl_s, clock
        self._added_s: dict[str, float] = {}

    def add(self, mark: str) -> None:
        self._added_s[mark] = self._clock()

    def __contains__(self, mark: object) -> bool:
        return mark in self._added_s

    def __len__(self) -> int:
        return len(self._added_s)

    def current(self) -> list[str]:
        """The marks to report, after dropping the expired ones."""
        horizon = self._clock() - self.ttl_s
        self._added_s = {m: t for m, t in self._added_s.items() if t >= horizon}
        return sorted(self._added_s)


@dataclass
class _Report:
    received_s: float
    counts: dict[str, int]
    acks: set[str] = field(default_factory=set)
    last_used_s: dict[str, float] = field(default_factory=dict)


class ClusterInFlight:
    def __init__(
        self,
        nc: Client,
        frontend_id: str,
        local: Callable[[], list[Replica]],
        interval_s: float = REPORT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.nc, self.frontend_id, self._local, self.interval_s = nc, frontend_id, local, interval_s
        self._clock = clock
        self._remote: dict[str, _Report] = {}
        self._last_used_s: dict[str, float] = {}  # latest use of each replica by any frontend
        self.acks = AckSet(clock=clock)  # eviction / config marks this frontend has applied

    async def start(self) -> None:
        await self.nc.subscribe(SUBJECT, cb=self._on_report)

    def _live(self) -> dict[str, _Report]:
        horizon = self._clock() - self.interval_s * STALE_AFTER_REPORTS
        return {fid: r for fid, r in self._remote.items() if r.received_s >= horizon}

    def total(self, replica: Replica) -> int:
        return replica.in_flight + sum(r.counts.get(replica.key, 0) for r in self._live().values())

    def remote_total(self, key: str) -> int:
        return sum(r.counts.get(key, 0) for r in self._live().values())

    def remote_sum(self, replicas: list[Replica]) -> int:
        """The other frontends' requests in flight on any of `replicas` (0 at once with no peer: no allocation)."""
        if not self._remote:
            return 0
        return sum(r.counts.get(replica.key, 0) for r in self._live().values() for replica in replicas)

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
            report = _Report(
                self._clock(), dict(body["counts"]), set(body["acks"]), dict(body.get("used", {}))
            )
            self._remote[body["frontend"]] = report
            self._forget_silent_peers(report.received_s)
            for key, used_s in report.last_used_s.items():
                self._last_used_s[key] = max(used_s, self._last_used_s.get(key, 0.0))
        except (ValueError, KeyError, TypeError):
            log.debug("ignoring malformed in-flight report")

    def _forget_silent_peers(self, now_s: float) -> None:
        gone = [fid for fid, r in self._remote.items() if r.received_s < now_s - PEER_FORGET_S]
        for fid in gone:
            del self._remote[fid]

    def _forget_old_uses(self) -> None:
        horizon_s = time.time() - LAST_USE_KEEP_S
        if any(used_s < horizon_s for used_s in self._last_used_s.values()):
            self._last_used_s = {k: used_s for k, used_s in self._last_used_s.items() if used_s >= horizon_s}

    async def publish_once(self) -> None:
        replicas = self._local()
        counts = {r.key: r.in_flight for r in replicas if r.in_flight}
        used = {r.key: r.last_used_s for r in replicas if r.last_used_s}
        for key, used_s in used.items():
            self._last_used_s[key] = max(used_s, self._last_used_s.get(key, 0.0))
        body = {"frontend": self.frontend_id, "counts": counts, "acks": self.acks.current(), "used": used}
        await self.nc.publish(SUBJECT, json.dumps(body).encode())
        self._forget_silent_peers(self._clock())
        self._forget_old_uses()

    async def run(self, stop: asyncio.Event) -> None:
        # a NATS blip: the next report heals it; never slower than the interval peers judge liveness by
        await run_periodic(
            "in-flight reports", self.publish_once, self.interval_s, stop, backoff_cap_s=self.interval_s
        )
