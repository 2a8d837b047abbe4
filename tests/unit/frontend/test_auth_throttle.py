"""frontend/auth_throttle: failed API-key guesses per source, delayed in the later half of the limit, then refused for the rest of the window."""

from __future__ import annotations

import pytest

from corral.frontend.auth_throttle import AuthThrottle


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def test_a_source_past_its_limit_waits_for_the_rest_of_its_window() -> None:
    clock = Clock()
    throttle = AuthThrottle(limit=4, window_s=60.0, clock=clock)
    for _ in range(4):
        assert throttle.retry_after_s("10.0.0.1") == 0.0
        throttle.charge("10.0.0.1")
    clock.now_s += 15
    assert throttle.retry_after_s("10.0.0.1") == 45.0
    assert throttle.retry_after_s("10.0.0.2") == 0.0  # another source is not affected
    assert throttle.refusal(44.2) == (
        "too many unknown API keys from this address: 4 in 60s "
        "(CORRAL_AUTH_FAILURE_LIMIT, CORRAL_AUTH_FAILURE_WINDOW); retry after 45s "
        "with a valid key",
        45,
    )


def test_refused_attempts_do_not_extend_the_window_so_the_source_gets_its_turn_again() -> None:
    clock = Clock()
    throttle = AuthThrottle(limit=2, window_s=10.0, clock=clock)
    throttle.charge("s")
    throttle.charge("s")
    for _ in range(5):
        clock.now_s += 1.9
        assert throttle.retry_after_s("s") > 0
    clock.now_s += 0.6  # 10 s after the first guess
    assert throttle.retry_after_s("s") == 0.0


def test_a_right_key_is_refunded_and_does_not_count_nor_start_the_window() -> None:
    clock = Clock()
    throttle = AuthThrottle(limit=2, window_s=10.0, clock=clock)
    for _ in range(5):
        throttle.charge("s")
        throttle.refund("s")
    assert throttle.retry_after_s("s") == 0.0
    clock.now_s += 8  # the window of the guesses below starts with them, not with the right key before them
    throttle.charge("s")
    throttle.charge("s")
    clock.now_s += 5
    assert throttle.retry_after_s("s") == 5.0


@pytest.mark.parametrize("guesses, delay_s", [(1, 0.0), (4, 0.0), (5, 0.25), (6, 0.5), (7, 1.0), (8, 2.0)])
def test_the_later_half_of_the_limit_is_answered_after_a_doubling_delay(guesses: int, delay_s: float) -> None:
    throttle = AuthThrottle(
        limit=8, window_s=60.0, clock=Clock()
    )  # first 4 free, then 0.25 s doubling to 2 s
    for _ in range(guesses):
        throttle.charge("s")
    assert throttle.delay_s("s") == delay_s


def test_the_table_is_bounded_and_evicts_the_oldest_source() -> None:
    throttle = AuthThrottle(limit=1, window_s=60.0, clock=Clock(), max_sources=2)
    for source in ("a", "b", "c"):
        throttle.charge(source)
    assert [throttle.retry_after_s(s) > 0 for s in ("a", "b", "c")] == [False, True, True]
