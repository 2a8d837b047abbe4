"""Admission of engine calls: up to `capacity` at once, first come first served, exclusive calls alone."""

from __future__ import annotations

import asyncio

import pytest

from corral.backends.admission import Admission


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_up_to_capacity_run_at_once_and_the_next_waits_for_a_free_place() -> None:
    async def scenario() -> None:
        admission, order = Admission(2), []
        release = asyncio.Event()

        async def call(name: str) -> None:
            async with admission.slot():
                order.append(f"start {name}")
                await release.wait()
                order.append(f"end {name}")

        tasks = [asyncio.ensure_future(call(name)) for name in "abc"]
        await settle()
        assert order == ["start a", "start b"] and admission.full() and admission.waiting == 1
        release.set()
        await asyncio.gather(*tasks)
        assert order.index("start c") > order.index("end a")
        assert admission.running == 0 and not admission.full()

    asyncio.run(scenario())


def test_an_exclusive_call_waits_for_running_calls_and_keeps_later_ones_out() -> None:
    async def scenario() -> None:
        admission, order = Admission(4), []
        release = asyncio.Event()

        async def call(name: str) -> None:
            async with admission.slot():
                order.append(f"start {name}")
                await release.wait()

        async def load() -> None:
            async with admission.exclusive():
                order.append("load")
                assert admission.full()

        first = asyncio.ensure_future(call("a"))
        await settle()
        loading = asyncio.ensure_future(load())
        later = asyncio.ensure_future(
            call("b")
        )  # arrived after the load: not before it, though there is room
        await settle()
        assert order == ["start a"]
        release.set()
        await asyncio.gather(first, loading, later)
        assert order == ["start a", "load", "start b"]

    asyncio.run(scenario())


def test_a_caller_cancelled_while_waiting_leaves_the_queue_and_the_next_one_gets_the_place() -> None:
    async def scenario() -> None:
        admission = Admission(1)
        release = asyncio.Event()

        async def call() -> None:
            async with admission.slot():
                await release.wait()

        running = asyncio.ensure_future(call())
        gone, next_one = asyncio.ensure_future(call()), asyncio.ensure_future(call())
        await settle()
        gone.cancel()
        await settle()
        assert admission.waiting == 1
        release.set()
        await asyncio.gather(running, next_one)
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert admission.running == 0

    asyncio.run(scenario())


def test_raising_the_capacity_admits_the_waiting_calls() -> None:
    async def scenario() -> None:
        admission = Admission(1)
        release = asyncio.Event()
        started = 0

        async def call() -> None:
            nonlocal started
            async with admission.slot():
                started += 1
                await release.wait()

        tasks = [asyncio.ensure_future(call()) for _ in range(3)]
        await settle()
        assert started == 1
        admission.capacity = 3
        await settle()
        assert started == 3 and admission.full()
        release.set()
        await asyncio.gather(*tasks)

    asyncio.run(scenario())
