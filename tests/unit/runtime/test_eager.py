"""`runtime.eager.start`: a coroutine run in the caller's turn, a task only for the rest of one that waits."""

from __future__ import annotations

import asyncio

import pytest

from corral.runtime import eager


async def test_a_coroutine_that_never_waits_finishes_in_the_call_without_a_task() -> None:
    ran: list[str] = []

    async def answer() -> None:
        ran.append("answered")

    tasks_before = len(asyncio.all_tasks())
    assert eager.start(answer()) is None
    assert ran == ["answered"]  # before start returned
    assert len(asyncio.all_tasks()) == tasks_before


async def test_a_coroutine_that_waits_continues_in_a_task_with_what_it_waited_for() -> None:
    loop = asyncio.get_running_loop()
    first, second = loop.create_future(), loop.create_future()
    got: list[object] = []

    async def call() -> None:
        got.append(await first)
        await asyncio.sleep(0)  # a bare yield between
        got.append(await second)

    task = eager.start(call())
    assert task is not None and not task.done()
    first.set_result("one")
    await asyncio.sleep(0)
    second.set_result("two")
    await task
    assert got == ["one", "two"]


async def test_cancelling_the_task_reaches_the_coroutine_where_it_waits() -> None:
    waiting = asyncio.get_running_loop().create_future()
    seen: list[str] = []

    async def call() -> None:
        try:
            await waiting
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    task = eager.start(call())
    assert task is not None
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"] and waiting.cancelled()


async def test_an_error_before_it_waits_is_raised_by_start_and_one_after_ends_the_task() -> None:
    async def refuses() -> None:
        raise ValueError("at once")

    with pytest.raises(ValueError, match="at once"):
        eager.start(refuses())

    waiting = asyncio.get_running_loop().create_future()

    async def fails_later() -> None:
        await waiting
        raise ValueError("later")

    task = eager.start(fails_later())
    assert task is not None
    waiting.set_result(None)
    with pytest.raises(ValueError, match="later"):
        await task
