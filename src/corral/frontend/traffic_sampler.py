"""The traffic series' sampler: this frontend's figures once per interval, shared with every frontend over NATS.

At the end of each interval (CORRAL_TRAFFIC_SAMPLE_INTERVAL, aligned to the wall clock so that every frontend's
interval N is the same span) the sampler reads this frontend's own Prometheus families (traffic_counters.py: the
warm path records nothing more than it did), adds the in-flight and queued requests it holds now, merges the
sample into its ring and publishes it on `telemetry.traffic.sample`; each frontend merges the samples of all the
others into its own ring, so any frontend answers `GET /api/traffic` alike. It also reads the nodes' memory and
disk from PostgreSQL (one statement per interval, where heartbeats already land) into the same slot.

A frontend that starts asks its peers for their ring (`telemetry.traffic.snapshot`, the newest intervals that fit
in one message), so its Dashboard shows the last hour too; with no peer, its ring fills from its start.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable

import asyncpg
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from corral.routing.replica import Replica
from corral.runtime.loops import wait_or_stop
from corral.store.node_resources import NodeResources, node_resources
from corral.telemetry.traffic_counters import TrafficFamilies, difference, read_queued, read_totals
from corral.telemetry.traffic_ring import NodeFigures, TrafficRing
from corral.telemetry.traffic_sample import FrontendSample, ModelSample

log = logging.getLogger(__name__)

SUBJECT = "telemetry.traffic.sample"
SNAPSHOT_SUBJECT = "telemetry.traffic.snapshot"  # a frontend that starts asks its peers for their ring
SNAPSHOT_TIMEOUT_S = 1.0
SNAPSHOT_MAX_BYTES = 768 << 10  # under NATS' default 1 MiB payload; the newest intervals go first
NODE_READ_TIMEOUT_S = 3.0
WAKE_AFTER_FRACTION = 0.05  # sample this far into the next interval: the last one is over on every frontend


def node_figures(rows: Iterable[NodeResources]) -> dict[str, NodeFigures]:
    return {
        r.id: NodeFigures(
            name=r.name,
            vram_used_bytes=max(0, r.total_vram - r.available_vram),
            vram_total_bytes=r.total_vram,
            ram_used_bytes=max(0, r.total_ram - r.available_ram),
            ram_total_bytes=r.total_ram,
            disk_free_bytes=r.available_disk,
        )
        for r in rows
    }


class TrafficSampler:
    def __init__(
        self,
        nc: Client | None,
        pool: asyncpg.Pool | None,
        frontend_id: str,
        interval_s: float,
        replicas: Callable[[], Iterable[Replica]],
        families: TrafficFamilies | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.nc, self.pool, self.frontend_id, self.interval_s = nc, pool, frontend_id, interval_s
        self.ring = TrafficRing(interval_s)
        self._replicas, self._clock = replicas, clock
        self._families = families or TrafficFamilies()
        self._before = read_totals(self._families)  # counted before the start belongs to no interval of ours
        self._last_bucket: int | None = None
        self._node_read_failed = False

    async def start(self) -> None:
        """Hear the other frontends' samples, then take a peer's ring (before answering for our own, empty one)."""
        if self.nc is None:
            return
        await self.nc.subscribe(SUBJECT, cb=self._on_sample)
        await self._load_snapshot(self.nc)
        await self.nc.subscribe(SNAPSHOT_SUBJECT, cb=self._on_snapshot_request)

    async def _load_snapshot(self, nc: Client) -> None:
        try:
            ask = json.dumps({"interval_s": self.interval_s}).encode()
            reply = await nc.request(SNAPSHOT_SUBJECT, ask, timeout=SNAPSHOT_TIMEOUT_S)
        except (NoRespondersError, NatsTimeoutError):
            return  # the first frontend: its ring fills from now
        try:
            taken = self.ring.restore(json.loads(reply.data), self._clock())
        except (ValueError, TypeError) as exc:
            log.warning("ignoring a malformed traffic snapshot from a peer: %s", exc)
            return
        log.info("traffic series: %d interval(s) of history taken from a peer", taken)

    async def _on_snapshot_request(self, msg: Msg) -> None:
        """Answer with our ring, unless the asker samples at another interval (its ring could not take ours)."""
        try:
            interval_s = json.loads(msg.data).get("interval_s")
        except (ValueError, AttributeError):
            return
        if msg.reply and isinstance(interval_s, int | float) and math.isclose(interval_s, self.interval_s):
            budget = (
                min(SNAPSHOT_MAX_BYTES, max(1024, self.nc.max_payload - 1024))
                if self.nc
                else SNAPSHOT_MAX_BYTES
            )
            await msg.respond(json.dumps(self.ring.snapshot(budget), separators=(",", ":")).encode())

    async def _on_sample(self, msg: Msg) -> None:
        try:
            sample = FrontendSample.from_json(json.loads(msg.data))
        except (ValueError, TypeError):
            log.debug("ignoring a malformed traffic sample")
            return
        if sample.frontend != self.frontend_id:
            self.ring.add_sample(sample, self._clock())

    def take(self, bucket: int) -> FrontendSample:
        """This frontend's figures since the last take, as interval `bucket`'s sample."""
        totals = read_totals(self._families)
        models = difference(self._before, totals)
        self._before = totals
        in_flight = Counter[str]()
        for replica in self._replicas():
            in_flight[replica.model] += replica.in_flight
        for model, count in in_flight.items():
            if count > 0:
                models.setdefault(model, ModelSample()).in_flight = count
        for model, count in read_queued(self._families).items():
            models.setdefault(model, ModelSample()).queued = count
        return FrontendSample(self.frontend_id, bucket, self.interval_s, models)

    async def sample_once(self) -> None:
        now_s = self._clock()
        bucket = self.ring.bucket_of(now_s) - 1  # the interval that just ended
        if bucket == self._last_bucket:
            return  # woke early in the same interval: the next wake takes it all
        self._last_bucket = bucket
        sample = self.take(bucket)
        self.ring.add_sample(sample, now_s)
        if self.nc is not None and self.nc.is_connected:
            await self.nc.publish(SUBJECT, json.dumps(sample.to_json(), separators=(",", ":")).encode())
        if self.pool is not None:
            await self._read_nodes(bucket, now_s)

    async def _read_nodes(self, bucket: int, now_s: float) -> None:
        try:
            async with asyncio.timeout(NODE_READ_TIMEOUT_S):
                rows = await node_resources(self.pool)
        except Exception as exc:
            if not self._node_read_failed:
                log.warning(
                    "traffic series: nodes' memory and disk not read (PostgreSQL: %s)",
                    exc or type(exc).__name__,
                )
            self._node_read_failed = True
            return
        self._node_read_failed = False
        self.ring.add_nodes(bucket, node_figures(rows), now_s)

    def _until_next_s(self) -> float:
        now_s = self._clock()
        wake_s = (self.ring.bucket_of(now_s) + 1 + WAKE_AFTER_FRACTION) * self.interval_s
        return max(0.0, wake_s - now_s)

    async def run(self, stop: asyncio.Event) -> None:
        """Sample at each interval's end until `stop`; a failed sample is logged and the next one goes on."""
        while not await wait_or_stop(stop, self._until_next_s()):
            try:
                await self.sample_once()
            except Exception:
                log.exception("traffic sample failed; the next interval goes on")
