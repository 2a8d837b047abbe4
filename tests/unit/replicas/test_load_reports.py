"""Load reports: what a frontend says of each model's queue, and how the reconciler's frontend adds them up."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from corral.placement.autoscale import LoadSignal
from corral.replicas.load_reports import LoadReports, ModelLoad, model_load
from corral.routing.queue import ModelQueue, QueueSettings, QueueStats


def stats(**fields: Any) -> QueueStats:
    base = {"depth": 0, "busy": 0, "oldest_wait_s": 0.0, "wait_p95_s": 0.0, "ttft_p95_s": 0.0, "served": 0}
    return QueueStats(**{**base, "refused": 0, **fields})


def test_a_wait_percentile_is_reported_only_while_it_is_news() -> None:
    moved = stats(served=12, wait_p95_s=3.0, busy=2, ttft_p95_s=4.0)
    assert model_load(moved, served_before=10) == ModelLoad(0, 3.0, 4.0)
    still = stats(served=12, wait_p95_s=3.0, busy=2, ttft_p95_s=4.0)
    assert model_load(still, served_before=12) == ModelLoad(0, 0.0, 4.0)  # nothing dispatched since: no wait
    assert model_load(stats(served=12, wait_p95_s=3.0, ttft_p95_s=4.0), 12) is None  # idle: nothing to say


def test_a_request_still_waiting_counts_with_its_wait_so_far() -> None:
    stuck = stats(depth=3, busy=1, oldest_wait_s=9.0, wait_p95_s=1.0, served=5)
    assert model_load(stuck, served_before=5) == ModelLoad(3, 9.0, 0.0)


@dataclass
class Message:
    data: bytes


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


async def test_the_signal_is_the_worst_wait_and_ttft_and_the_summed_depth_of_live_frontends() -> None:
    clock = Clock()
    queue = ModelQueue(QueueSettings(), capacity=lambda model: 1)
    reports = LoadReports(None, "me", queue, interval_s=2.0, clock=clock)  # type: ignore[arg-type]
    for frontend, figures in (("a", [2, 1.0, 5.0]), ("b", [3, 4.0, 0.5])):
        body = {"frontend": frontend, "models": {"m": figures}}
        await reports._on_report(Message(json.dumps(body).encode()))  # type: ignore[arg-type]
    await reports._on_report(Message(b'{"frontend": "c", "models": "junk"}'))  # type: ignore[arg-type]
    assert reports.signal("m") == LoadSignal(wait_p95_s=4.0, ttft_p95_s=5.0, depth=5, frontends=2)
    assert reports.signal("other") == LoadSignal(frontends=2)
    clock.now_s += 6.1  # three intervals without a report: those frontends are gone
    assert reports.signal("m") == LoadSignal()


async def test_waiting_is_this_frontends_queue_now_plus_the_live_peers_reported_depth() -> None:
    clock = Clock()
    queue = ModelQueue(QueueSettings(), capacity=lambda model: 0)  # no slot: every request waits
    reports = LoadReports(None, "me", queue, interval_s=2.0, clock=clock)  # type: ignore[arg-type]
    body = {"frontend": "peer", "models": {"m": [4, 1.0, 0.0]}}
    await reports._on_report(Message(json.dumps(body).encode()))  # type: ignore[arg-type]
    assert reports.waiting("m") == 4 and reports.waiting("other") == 0
    clock.now_s += 6.1  # the peer went silent: its figures no longer count
    assert reports.waiting("m") == 0
