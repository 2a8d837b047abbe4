"""The event-loop watch catches a callback that holds the loop, and the e2e harness fails on it."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from corral.runtime.loopwatch import LoopWatch, stalls_in_log
from support.cluster import Proc, assert_no_loop_stalls


def _stalls(process: str) -> float:
    return REGISTRY.get_sample_value("corral_event_loop_stalls_total", {"process": process}) or 0.0


def _busy_ms(ms: float) -> None:
    """Compute without yielding: what GGUF parsing on the loop did."""
    end = time.thread_time() + ms / 1000
    while time.thread_time() < end:
        pass


async def test_a_callback_computing_past_the_threshold_is_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    watch = LoopWatch("test-busy", threshold_ms=100, stacks=False)
    watch.start()
    before = _stalls("test-busy")
    try:
        await asyncio.sleep(0.05)
        with caplog.at_level(logging.WARNING, logger="corral.runtime.loopwatch"):
            asyncio.get_running_loop().call_soon(_busy_ms, 300)
            await asyncio.sleep(0.1)
    finally:
        await watch.stop()

    assert watch.stats.count >= 1
    assert watch.stats.max_s >= 0.1
    assert _stalls("test-busy") == before + watch.stats.count
    assert len(stalls_in_log(caplog.text, 100)) >= 1


def test_stall_lines_count_only_when_the_loop_thread_computed_past_the_threshold() -> None:
    log = "\n".join(
        [
            "W worker corral.runtime.loopwatch: event loop stalled for 450 ms (loop thread on CPU 430 ms; threshold 100 ms, x)",
            "W worker corral.runtime.loopwatch: event loop stalled for 300 ms (loop thread on CPU 4 ms; threshold 100 ms, x)",
        ]
    )

    assert stalls_in_log(log, 100) == [log.splitlines()[0]]


def test_a_stall_is_reported_with_the_stack_logged_while_it_lasted() -> None:
    log = "\n".join(
        [
            "W frontend corral.runtime.loopwatch: event loop blocked for over 100 ms, in:",
            '  File "/x/vram.py", line 20, in _kv_bytes_per_token',
            "    reader = GGUFReader(path)",
            "I frontend corral.other: unrelated",
            "W frontend corral.runtime.loopwatch: event loop stalled for 9000 ms (loop thread on CPU 8990 ms; threshold 100 ms, x)",
        ]
    )

    assert stalls_in_log(log, 100) == ["\n".join([*log.splitlines()[:3], log.splitlines()[4]])]


BLOCKING_PROCESS = textwrap.dedent("""
    import asyncio, logging, time
    from corral.runtime.loopwatch import watched

    logging.basicConfig(level=logging.INFO)

    async def main() -> int:
        await asyncio.sleep(0.1)
        end = time.thread_time() + 0.5
        while time.thread_time() < end:  # a blocking callback: half a second of CPU on the loop
            pass
        await asyncio.sleep(0.2)
        return 0

    raise SystemExit(asyncio.run(watched(main(), "blocker", 100)))
""")


def test_the_harness_fails_a_test_whose_process_blocked_its_loop(tmp_path: Path) -> None:
    log_path = tmp_path / "blocker.log"
    with open(log_path, "wb") as handle:
        popen = subprocess.Popen(
            [sys.executable, "-c", BLOCKING_PROCESS], stdout=handle, stderr=subprocess.STDOUT
        )
    popen.wait(60)
    proc = Proc("blocker", popen, log_path)

    with pytest.raises(AssertionError) as caught:
        assert_no_loop_stalls([proc])
    message = str(caught.value)
    assert message.startswith(
        "event loop stalls over 100 ms (CORRAL_SLOW_CALLBACK_MS), each after the stack that "
        "blocked when the watchdog caught it:\nblocker: WARNING:corral.runtime.loopwatch:event loop "
        "blocked for over 100 ms, in:\n"
    )
    assert ", in main\n" in message  # the watchdog named the function that blocked
