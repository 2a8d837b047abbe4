"""routing/queue.py: slots, priority classes, Virtual Token Counter fairness, bounds — on the real event loop."""

from __future__ import annotations

import asyncio

import pytest

from corral.routing.queue import (
    DEPTH_KNOB,
    TIMEOUT_KNOB,
    ModelQueue,
    QueueFull,
    QueueSettings,
    QueueTimeout,
    replica_slots,
)
from corral.tenancy.caller import Caller
from corral.tenancy.usage import Counts

M = "m"


def _queue(slots: int = 1, timeout_s: float = 30.0, depth: int = 100) -> tuple[ModelQueue, dict[str, int]]:
    capacity = {M: slots}
    return ModelQueue(QueueSettings(slots, timeout_s, depth), lambda model: capacity[model]), capacity


def _who(tenant: str, priority: str = "normal") -> Caller:
    return Caller(tenant=tenant, key_id=tenant, priority=priority)


async def _enqueue(queue: ModelQueue, caller: Caller, order: list[str]) -> asyncio.Task[None]:
    async def one() -> None:
        await queue.admit(M, caller)
        order.append(caller.tenant)

    task = asyncio.create_task(one())
    await asyncio.sleep(0)  # it reaches the queue before the next one is made
    return task


async def test_a_free_slot_is_taken_at_once_and_a_full_model_queues_until_release() -> None:
    queue, _ = _queue(slots=1)
    await queue.admit(M, _who("a"))  # no wait: the warm path
    order: list[str] = []
    waiting = await _enqueue(queue, _who("b"), order)
    assert queue.stats(M).depth == 1 and order == []
    queue.release(M)
    await waiting
    assert order == ["b"] and queue.stats(M).busy == 1 and queue.stats(M).served == 1


async def test_more_urgent_classes_go_first_and_batch_goes_last() -> None:
    queue, _ = _queue(slots=1)
    await queue.admit(M, _who("x"))
    order: list[str] = []
    tasks = [
        await _enqueue(queue, _who("batch-job", "batch"), order),
        await _enqueue(queue, _who("normal", "normal"), order),
        await _enqueue(queue, _who("critical", "critical"), order),
    ]
    for _ in tasks:
        queue.release(M)
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    assert order == ["critical", "normal", "batch-job"]


async def test_vtc_a_flooding_tenant_does_not_starve_a_light_one() -> None:
    """Heavy sends 20 requests before light sends 3; light's are served interleaved, not after all of heavy's."""
    queue, _ = _queue(slots=1)
    await queue.admit(M, _who("heavy"))
    order: list[str] = []
    tasks = [await _enqueue(queue, _who("heavy"), order) for _ in range(20)]
    tasks += [await _enqueue(queue, _who("light"), order) for _ in range(3)]
    for _ in tasks:
        queue.charge(_who(order[-1] if order else "heavy"), M, Counts(prompt=10, completion=20))
        queue.release(M)
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    assert max(i for i, t in enumerate(order) if t == "light") < 8, order


async def test_vtc_served_tokens_decide_between_tenants() -> None:
    """Of two waiting tenants, the one served fewer tokens goes next, whatever the arrival order."""
    queue, _ = _queue(slots=1)
    await queue.admit(M, _who("holder"))
    order: list[str] = []
    tasks = [await _enqueue(queue, _who("big"), order), await _enqueue(queue, _who("small"), order)]
    queue.charge(_who("big"), M, Counts(prompt=1000, completion=1000))  # big's earlier call just ended
    queue.release(M)
    await asyncio.sleep(0)
    queue.release(M)
    await asyncio.gather(*tasks)
    assert order == ["small", "big"]


async def test_an_idle_tenant_banks_no_credit() -> None:
    """VTC's lift: a tenant that starts waiting starts at the smallest counter of those already waiting."""
    queue, _ = _queue(slots=1)
    await queue.admit(M, _who("a"))
    order: list[str] = []
    for _ in range(3):  # a alone, served a lot
        task = await _enqueue(queue, _who("a"), order)
        queue.charge(_who("a"), M, Counts(prompt=100, completion=100))
        queue.release(M)
        await task
    a_waits = [await _enqueue(queue, _who("a"), order) for _ in range(2)]
    b_waits = [await _enqueue(queue, _who("b"), order) for _ in range(2)]
    order.clear()
    for _ in range(4):
        queue.release(M)
        await asyncio.sleep(0)
    await asyncio.gather(*a_waits, *b_waits)
    assert order[:2] != ["b", "b"], order  # b was lifted to a's counter: they alternate, b does not run twice


async def test_a_full_queue_refuses_at_once_naming_the_setting() -> None:
    queue, _ = _queue(slots=1, depth=2)
    await queue.admit(M, _who("a"))
    order: list[str] = []
    tasks = [await _enqueue(queue, _who("a"), order) for _ in range(2)]
    with pytest.raises(QueueFull) as refused:
        await queue.admit(M, _who("b"))
    assert DEPTH_KNOB in str(refused.value) and refused.value.retry_after_s >= 1
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert queue.stats(M).depth == 0


async def test_a_request_past_its_wait_budget_gets_queue_timeout_naming_the_setting() -> None:
    queue, _ = _queue(slots=1, timeout_s=0.05)
    await queue.admit(M, _who("a"))
    with pytest.raises(QueueTimeout) as timed_out:
        await queue.admit(M, _who("b"))
    assert TIMEOUT_KNOB in str(timed_out.value) and "50ms" in str(timed_out.value).replace(" ", "")
    assert queue.stats(M).depth == 0 and queue.stats(M).refused == 1 and queue.stats(M).busy == 1


async def test_a_cancelled_waiter_leaves_the_queue_and_takes_no_slot() -> None:
    queue, _ = _queue(slots=1)
    await queue.admit(M, _who("a"))
    order: list[str] = []
    gone = await _enqueue(queue, _who("gone"), order)
    stays = await _enqueue(queue, _who("stays"), order)
    gone.cancel()
    await asyncio.gather(gone, return_exceptions=True)
    queue.release(M)
    await stays
    assert order == ["stays"] and queue.stats(M).busy == 1


async def test_growing_capacity_serves_waiters_on_poke() -> None:
    queue, capacity = _queue(slots=1)
    await queue.admit(M, _who("a"))
    order: list[str] = []
    tasks = [await _enqueue(queue, _who(t), order) for t in ("b", "c")]
    capacity[M] = 3  # a replica was added
    queue.poke()
    await asyncio.gather(*tasks)
    assert sorted(order) == ["b", "c"] and queue.stats(M).busy == 3


async def test_stats_report_waits_and_first_tokens() -> None:
    queue, _ = _queue(slots=1)
    queue.first_token(M, 0.25)
    stats = queue.stats(M)
    assert stats.ttft_p95_s == 0.25 and stats.depth == 0 and stats.wait_p95_s == 0.0


async def test_a_tenant_that_had_the_model_alone_keeps_no_debt_when_another_arrives() -> None:
    """VTC's lift with an empty queue: a newcomer starts at the counter of the tenant served last, so the tenant
    that used the model a lot while alone is not made to wait until the newcomer has caught up."""
    queue, _ = _queue(slots=1)
    for _ in range(50):  # "old" alone: a big counter, never waiting
        await queue.admit(M, _who("old"))
        queue.charge(_who("old"), M, Counts(prompt=100, completion=100))
        queue.release(M)
    await queue.admit(M, _who("new"))  # the newcomer holds the slot...
    order: list[str] = []
    tasks = [await _enqueue(queue, _who("new"), order) for _ in range(5)]  # ...and floods
    tasks.append(await _enqueue(queue, _who("old"), order))
    for _ in tasks:
        queue.charge(_who("new"), M, Counts(prompt=100, completion=100))
        queue.release(M)
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    assert order.index("old") <= 2, order


@pytest.mark.parametrize(
    "options, configured, slots",
    [
        ((), 0, 2),  # one sequence at a time: that one and the next
        (("parallel:4",), 0, 5),
        (("n_parallel:3", "chat_format:gemma"), 0, 4),
        (("parallel:x",), 0, 2),  # not a number: the backend refuses it at load; one sequence here
        (("parallel:4",), 8, 8),  # CORRAL_REPLICA_SLOTS wins when set
        (("parallel:100000",), 0, 257),
    ],
)
def test_a_replicas_slots_are_its_models_parallel_plus_one_unless_set(
    options: tuple[str, ...], configured: int, slots: int
) -> None:
    assert replica_slots(options, configured) == slots
