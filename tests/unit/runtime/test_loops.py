"""The one periodic-loop helper and task owner (src/corral/runtime/loops.py)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from corral.runtime.loops import OwnedTasks, backoff_s, run_periodic, wait_or_stop


class Surprise(Exception):
    """An exception type no loop body expects."""


@pytest.mark.parametrize(
    "failures, delay_s", [(0, 0.0), (1, 2.0), (2, 4.0), (3, 8.0), (5, 30.0), (500, 30.0)]
)
def test_backoff_doubles_from_the_first_delay_up_to_the_cap(failures: int, delay_s: float) -> None:
    assert backoff_s(failures, 2.0, 30.0) == delay_s


def test_backoff_jitter_only_shortens_the_pause_by_at_most_its_fraction() -> None:
    assert backoff_s(3, 1.0, 30.0, jitter=0.5, rand=lambda: 1.0) == 2.0
    assert backoff_s(3, 1.0, 30.0, jitter=0.5, rand=lambda: 0.0) == 4.0


async def test_a_loop_whose_body_raises_an_unexpected_exception_type_keeps_running(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stop = asyncio.Event()
    calls: list[int] = []

    async def body() -> None:
        calls.append(len(calls))
        if len(calls) <= 2:
            raise Surprise("nobody expected this")
        if len(calls) == 4:
            stop.set()

    with caplog.at_level(logging.WARNING, logger="corral.runtime.loops"):
        await asyncio.wait_for(run_periodic("surprised", body, 0.001, stop, backoff_cap_s=0.001), 10)
    assert calls == [0, 1, 2, 3]
    failures = [r.getMessage() for r in caplog.records if "surprised" in r.getMessage()]
    assert failures[0].startswith("surprised: pass failed (1 in a row; next try in ")
    assert failures[0].endswith("s): Surprise: nobody expected this")
    assert failures[1].startswith("surprised: pass failed (2 in a row;")


async def test_a_wake_event_starts_the_next_pass_at_once() -> None:
    stop, wake, calls = asyncio.Event(), asyncio.Event(), []

    async def body() -> None:
        calls.append(1)
        if len(calls) == 2:
            stop.set()

    task = asyncio.create_task(run_periodic("woken", body, 3600.0, stop, wake=wake))
    while not calls:
        await asyncio.sleep(0.001)
    wake.set()
    await asyncio.wait_for(task, 10)  # without the wake, the second pass would come in an hour
    assert len(calls) == 2


async def test_wait_or_stop_says_whether_stop_was_set() -> None:
    stop = asyncio.Event()
    assert await wait_or_stop(stop, 0.001) is False
    stop.set()
    assert await wait_or_stop(stop, 3600.0) is True


async def test_a_task_that_dies_ends_the_wait_naming_the_task() -> None:
    owned, stop = OwnedTasks(), asyncio.Event()

    async def dies() -> None:
        raise Surprise("boom")

    owned.start("steady", stop.wait())
    owned.start("fragile", dies())
    assert (
        await asyncio.wait_for(owned.until_stop(stop), 10) == "background task fragile died: Surprise: boom"
    )
    stop.set()
    await owned.close(1.0)


async def test_a_task_that_returns_while_the_process_runs_is_reported() -> None:
    owned, stop = OwnedTasks(), asyncio.Event()

    async def returns() -> None:
        return None

    owned.adopt([asyncio.create_task(returns(), name="quitter")])
    assert await asyncio.wait_for(owned.until_stop(stop), 10) == "background task quitter ended unexpectedly"


async def test_stop_ends_the_wait_without_a_reason_and_close_ends_started_tasks() -> None:
    owned, stop = OwnedTasks(), asyncio.Event()
    task = owned.start("sleeper", asyncio.sleep(3600))
    stop.set()
    assert await owned.until_stop(stop) is None
    await owned.close(0.01)
    assert task.cancelled()
