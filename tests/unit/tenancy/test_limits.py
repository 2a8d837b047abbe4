"""Keys' rate limits and quotas (tenancy/limits.py) over an injected clock, and the counts frontends share."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from corral.tenancy.caller import Caller
from corral.tenancy.limits import (
    OVER_QUOTA,
    RATE_LIMITED,
    Limits,
    MinuteWindow,
    next_month_s,
    reset_text,
)
from corral.tenancy.policy import KeyPolicy
from corral.tenancy.usage import Counts


class Clock:
    def __init__(self, now_s: float) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


class Ledger:
    """The ledger's `tokens_used` over a list of (epoch second, key, tokens)."""

    def __init__(self) -> None:
        self.used: list[tuple[float, str, int]] = []

    def tokens_used(self, key_id: str, since_s: float) -> int:
        return sum(n for at_s, key, n in self.used if key == key_id and at_s >= since_s)


NOON_3_DEC = datetime(2026, 12, 3, 12, 0, tzinfo=UTC).timestamp()


def _headers(headers: tuple[tuple[bytes, bytes], ...]) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in headers}


def test_a_minute_window_forgets_slots_older_than_a_minute() -> None:
    window = MinuteWindow()
    window.add(100.2, 3)
    window.add(100.9, 1)
    window.add(130.0, 2)
    assert window.count(159.9) == 6
    assert window.count(160.0) == 2  # the slot of second 100 left at 160
    assert window.count(190.0) == 0


def test_a_key_over_its_rpm_gets_429_with_the_headers_until_the_oldest_request_leaves() -> None:
    clock = Clock(1000.0)
    limits = Limits(clock=clock)
    policy = KeyPolicy("k1", "team-a", rpm=3)
    for remaining in (2, 1, 0):
        refusal, headers = limits.admit(policy)
        assert refusal is None
        assert _headers(headers)["x-ratelimit-remaining-requests"] == str(remaining)
        clock.now_s += 10
    refusal, headers = limits.admit(policy)
    assert refusal is not None and refusal.code == RATE_LIMITED
    assert refusal.message == (
        "rate limit reached for API key 'team-a': 3 requests per minute (its `rpm`), 3 used in the last minute; "
        "retry in 30s"
    )
    assert _headers(headers) == {
        "retry-after": "30",
        "x-ratelimit-limit-requests": "3",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "30s",
    }
    assert (
        refusal.body["error"]["code"] == "rate_limit_exceeded" and refusal.body["error"]["type"] == "requests"
    )
    clock.now_s = 1060.0  # the first request's second left the window
    assert limits.admit(policy)[0] is None


def test_tokens_per_minute_count_what_the_engine_reported_for_the_key() -> None:
    clock = Clock(0.0)
    limits = Limits(clock=clock)
    policy = KeyPolicy("k1", "team-a", tpm=100)
    assert limits.admit(policy)[0] is None
    limits.record(Caller("team-a", "k1"), "m", Counts(prompt=60, completion=50))
    limits.record(Caller("other", "k2"), "m", Counts(prompt=1000))  # a key without limits: not counted
    refusal, headers = limits.admit(policy)
    assert refusal is not None and "100 tokens per minute (its `tpm`), 110 used" in refusal.message
    assert _headers(headers)["x-ratelimit-remaining-tokens"] == "0"
    assert refusal.body["error"]["type"] == "tokens"  # OpenAI's type of a token rate limit
    assert "k2" not in limits.windows


def test_windows_of_keys_idle_for_a_minute_are_forgotten() -> None:
    clock = Clock(0.0)
    limits = Limits(clock=clock)
    limits.admit(KeyPolicy("k1", rpm=5))
    limits.absorb(b'{"from": "other", "keys": {"k2": [1, 0]}}')
    clock.now_s = 30.0
    limits.admit(KeyPolicy("k2", rpm=5))
    clock.now_s = 61.0
    limits.prune()
    assert list(limits.windows) == ["k2"]


def test_keys_without_limits_get_no_headers_and_no_window() -> None:
    limits = Limits(ledger=Ledger())
    assert limits.admit(KeyPolicy("k1")) == (None, ())
    assert limits.windows == {}


def test_a_key_over_its_daily_quota_gets_insufficient_quota_naming_it_and_when_it_resets() -> None:
    ledger = Ledger()
    limits = Limits(ledger, wall_clock=Clock(NOON_3_DEC))
    policy = KeyPolicy("k1", "team-a", tokens_per_day=1000, tokens_per_month=5000)
    ledger.used.append((NOON_3_DEC - 86400, "k1", 900))  # yesterday: counts for the month only
    ledger.used.append((NOON_3_DEC - 60, "k1", 999))
    assert limits.admit(policy)[0] is None
    ledger.used.append((NOON_3_DEC - 30, "k1", 1))
    refusal, _headers_ = limits.admit(policy)
    assert refusal is not None and refusal.code == OVER_QUOTA and refusal.retry_after_s == 12 * 3600
    assert refusal.message == (
        "API key 'team-a' used its quota of 1000 tokens per UTC day (its `tokens_per_day`): 1000 used; it resets "
        "at 2026-12-04T00:00:00Z (in 720m0s); raise it with PATCH /api/keys/k1"
    )
    assert refusal.body["error"]["type"] == "insufficient_quota"


def test_the_monthly_quota_counts_the_whole_utc_month_and_resets_on_the_first() -> None:
    ledger = Ledger()
    limits = Limits(ledger, wall_clock=Clock(NOON_3_DEC))
    ledger.used.append((datetime(2026, 12, 1, tzinfo=UTC).timestamp(), "k1", 500))
    ledger.used.append((datetime(2026, 11, 30, tzinfo=UTC).timestamp(), "k1", 10_000))  # last month
    refusal, _ = limits.admit(KeyPolicy("k1", tokens_per_month=500))
    assert refusal is not None and "resets at 2027-01-01T00:00:00Z" in refusal.message
    assert (
        next_month_s(datetime(2027, 2, 10, tzinfo=UTC).timestamp())
        == datetime(2027, 3, 1, tzinfo=UTC).timestamp()
    )


def test_counts_published_by_one_frontend_are_added_by_the_others_not_by_itself() -> None:
    clock = Clock(0.0)
    a, b = Limits(clock=clock, frontend_id="a"), Limits(clock=clock, frontend_id="b")
    policy = KeyPolicy("k1", rpm=4)
    for _ in range(3):
        assert a.admit(policy)[0] is None
    a.charge("k1", 7)
    message = a.publishable()
    assert message is not None and a.publishable() is None  # each count is published once
    a.absorb(message)  # its own message back from NATS
    b.absorb(message)
    assert a.windows["k1"].requests.count(0.0) == b.windows["k1"].requests.count(0.0) == 3
    assert b.windows["k1"].tokens.count(0.0) == 7
    assert b.admit(policy)[0] is None  # the fourth request of the minute
    assert b.admit(policy)[0] is not None  # the fifth, on either frontend, is refused
    b.absorb(b"not json")  # ignored with a warning


@pytest.mark.parametrize("seconds, text", [(0.02, "20ms"), (1.5, "1.5s"), (59.0, "59s"), (360.0, "6m0s")])
def test_reset_times_are_written_as_openai_writes_them(seconds: float, text: str) -> None:
    assert reset_text(seconds) == text
