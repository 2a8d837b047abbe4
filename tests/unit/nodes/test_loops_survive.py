"""The health monitor used to end for good on an exception type it did not catch; now no loop does."""

from __future__ import annotations

import asyncio

from corral.nodes.health_monitor import HealthMonitor, StatusChange
from corral.nodes.held_beats import HeldBeats


async def test_the_health_monitor_keeps_running_after_an_unexpected_exception_type() -> None:
    monitor = HealthMonitor(None, HeldBeats(None), stale_threshold_s=60.0, interval_s=0.001)
    stop, passes = asyncio.Event(), []

    async def check_once() -> list[StatusChange]:
        passes.append(1)
        if len(passes) == 1:
            raise KeyError("a column the monitor never heard of")  # neither OSError nor PostgresError
        stop.set()
        return []

    monitor.check_once = check_once  # type: ignore[method-assign]
    await asyncio.wait_for(monitor.run(stop), 10)
    assert len(passes) == 2
