"""One call's tries (routing/calls.py `Attempts`): how many retries, within which budget, avoiding which replicas."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from corral.routing.breaker import Breakers, BreakerSettings
from corral.routing.calls import Attempts
from support.replicas import replicas


def _attempts(budget_s: float, retries: int = 2, backoff_s: float = 0.001) -> Attempts:
    breakers = Breakers(BreakerSettings(retries=retries, retry_backoff_s=backoff_s))
    # Attempts reads only the breakers' settings and the model's name
    router: Any = SimpleNamespace(view=SimpleNamespace(breakers=breakers))
    cfg: Any = SimpleNamespace(name="m")
    return Attempts(router, cfg, budget_s)


async def test_a_call_is_retried_at_most_the_configured_number_of_times() -> None:
    attempts, r = _attempts(60.0), replicas(1)[0]
    tries = []
    for _ in range(5):
        attempts.call_budget_s()
        tries.append(await attempts.again(r, "unavailable"))
    assert tries == [True, True, False, False, False] and attempts.retries == 2


async def test_no_retries_configured_means_the_first_failure_is_the_answer() -> None:
    attempts = _attempts(60.0, retries=0)
    attempts.call_budget_s()
    assert not await attempts.again(replicas(1)[0], "gone")


async def test_a_retry_whose_pause_does_not_fit_in_the_budget_left_is_not_made() -> None:
    attempts = _attempts(0.05, backoff_s=10.0)  # the first pause alone (5-10 s) is past the 50 ms budget
    attempts.call_budget_s()
    assert not await attempts.again(replicas(1)[0], "unavailable")


async def test_a_retry_gets_the_budget_less_what_the_failed_calls_and_pauses_spent() -> None:
    attempts = _attempts(60.0)
    assert attempts.call_budget_s() == 60.0  # the first call has the whole budget
    assert await attempts.again(replicas(1)[0], "unavailable")
    left_s = attempts.call_budget_s()
    assert 59.0 < left_s < 60.0


async def test_the_replicas_a_call_failed_on_are_avoided_by_its_retries() -> None:
    attempts, rs = _attempts(60.0), replicas(2)
    for r in rs:
        attempts.call_budget_s()
        await attempts.again(r, "unavailable")
    assert attempts._failed == {rs[0].key, rs[1].key}
