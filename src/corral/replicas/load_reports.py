"""Load reports: each frontend publishes its per-model queue figures on NATS; the reconciler's frontend adds them up.

Every `interval_s` (CORRAL_LOAD_REPORT_INTERVAL) a frontend sends, for each model its queue knows, what the
autoscaler reads: requests waiting, the queue wait p95 and the time-to-first-token p95. The queue's percentiles
are over its recent requests, not over a time window, so a report only carries them while they are news:
  * wait p95: when the queue dispatched a request since the last report or a request waits now (then the
    longest current wait counts too: a queue that never moves is over any target); else 0;
  * TTFT p95: while the model has requests in flight or waiting on this frontend; else 0.
A model with nothing to report is left out. The aggregate over the live reports (received within
STALE_AFTER_REPORTS intervals, this frontend's own included) is the worst wait p95 and TTFT p95 and the summed
depth: the autoscaler scales for the frontend whose callers wait the longest. The placement reads the waiting
counts too: a replica whose model has callers queued is not idle, so eviction leaves it (routing/eviction.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from nats.aio.client import Client
from nats.aio.msg import Msg

from corral.bus import subjects
from corral.placement.autoscale import LoadSignal
from corral.routing.queue import ModelQueue, QueueStats
from corral.runtime.loops import run_periodic

log = logging.getLogger(__name__)

STALE_AFTER_REPORTS = 3
MODELS_MAX = 1000  # per report, a bound on what one (possibly hostile) message may make us keep


@dataclass(frozen=True)
class ModelLoad:
    depth: int
    wait_p95_s: float
    ttft_p95_s: float

    def to_json(self) -> list[float]:
        return [self.depth, round(self.wait_p95_s, 4), round(self.ttft_p95_s, 4)]


def model_load(stats: QueueStats, served_before: int | None) -> ModelLoad | None:
    """This report's figures for one model from its queue's stats (None: nothing to report)."""
    moved = served_before is not None and stats.served != served_before
    waiting = stats.depth > 0
    wait = max(stats.wait_p95_s if (moved or waiting) else 0.0, stats.oldest_wait_s if waiting else 0.0)
    ttft = stats.ttft_p95_s if (stats.busy > 0 or waiting) else 0.0
    if not (waiting or wait or ttft):
        return None
    return ModelLoad(stats.depth, wait, ttft)


def _parse(body: object) -> tuple[str, dict[str, ModelLoad]]:
    if not isinstance(body, dict) or not isinstance(body.get("frontend"), str):
        raise ValueError("not a load report")
    models = body.get("models")
    if not isinstance(models, dict) or len(models) > MODELS_MAX:
        raise ValueError("bad models")
    out = {}
    for model, figures in models.items():
        depth, wait, ttft = figures
        out[str(model)] = ModelLoad(int(depth), float(wait), float(ttft))
    return body["frontend"], out


class LoadReports:
    def __init__(
        self,
        nc: Client,
        frontend_id: str,
        queue: ModelQueue,
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.nc, self.frontend_id, self.queue, self.interval_s, self._clock = (
            nc,
            frontend_id,
            queue,
            interval_s,
            clock,
        )
        self._reports: dict[str, tuple[float, dict[str, ModelLoad]]] = {}  # frontend → (received, models)
        self._served: dict[str, int] = {}  # model → the queue's served count at the last report

    async def start(self) -> None:
        await self.nc.subscribe(subjects.model_load_reports(), cb=self._on_report)

    def local(self) -> dict[str, ModelLoad]:
        """This frontend's figures now (and remember the served counts for the next report)."""
        out = {}
        for model in self.queue.models():
            stats = self.queue.stats(model)
            figures = model_load(stats, self._served.get(model))
            self._served[model] = stats.served
            if figures is not None:
                out[model] = figures
        return out

    async def publish_once(self) -> None:
        mine = self.local()
        self._reports[self.frontend_id] = (self._clock(), mine)
        body = {"frontend": self.frontend_id, "models": {m: f.to_json() for m, f in mine.items()}}
        await self.nc.publish(subjects.model_load_reports(), json.dumps(body).encode())
        self._forget_silent()

    async def _on_report(self, msg: Msg) -> None:
        try:
            frontend, models = _parse(json.loads(msg.data))
        except (ValueError, TypeError, KeyError):
            log.debug("ignoring a malformed load report")
            return
        if frontend != self.frontend_id:
            self._reports[frontend] = (self._clock(), models)

    def _live(self) -> list[dict[str, ModelLoad]]:
        horizon = self._clock() - self.interval_s * STALE_AFTER_REPORTS
        return [models for received, models in self._reports.values() if received >= horizon]

    def _forget_silent(self) -> None:
        horizon = self._clock() - self.interval_s * STALE_AFTER_REPORTS * 10
        for frontend in [f for f, (received, _) in self._reports.items() if received < horizon]:
            del self._reports[frontend]

    def signal(self, model: str) -> LoadSignal:
        """The model's load over the live frontends: worst wait and TTFT p95, summed depth."""
        live = self._live()
        mine = [models[model] for models in live if model in models]
        return LoadSignal(
            wait_p95_s=max((f.wait_p95_s for f in mine), default=0.0),
            ttft_p95_s=max((f.ttft_p95_s for f in mine), default=0.0),
            depth=sum(f.depth for f in mine),
            frontends=len(live),
        )

    def waiting(self, model: str) -> int:
        """Requests waiting for the model across the cluster: this frontend's queue now, the live peers' last
        reports (what keeps the evictor from stopping a replica callers are queued for)."""
        peers = sum(
            models[model].depth
            for frontend, (received, models) in self._reports.items()
            if frontend != self.frontend_id
            and model in models
            and received >= self._clock() - self.interval_s * STALE_AFTER_REPORTS
        )
        return self.queue.depth(model) + peers

    async def run(self, stop: asyncio.Event) -> None:
        await run_periodic(
            "load reports", self.publish_once, self.interval_s, stop, backoff_cap_s=self.interval_s
        )
