"""The usage ledger's in-memory side: rows per key x tenant x model x UTC hour, the bound, and `tokens_used`."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from corral.store import usage as usage_store
from corral.tenancy.caller import ANONYMOUS, Caller
from corral.tenancy.ledger import PendingUsage, UsageLedger, day_start_s, hour_of
from corral.tenancy.usage import Counts

T0 = dt.datetime(2026, 12, 4, 13, 59, 59, tzinfo=dt.UTC).timestamp()  # one second before 14:00 UTC
H13 = int(dt.datetime(2026, 12, 4, 13, tzinfo=dt.UTC).timestamp())
H14 = H13 + 3600
ALICE = Caller(tenant="team-a", key_id="key-a")


class Clock:
    def __init__(self, at_s: float) -> None:
        self.at_s = at_s

    def __call__(self) -> float:
        return self.at_s


def _ledger(clock: Clock, max_pending: int = 100) -> UsageLedger:
    none: Any = None  # no pool: nothing here flushes
    return UsageLedger(none, flush_interval_s=5.0, max_pending=max_pending, clock=clock)


def test_hour_of_is_the_start_of_the_utc_hour() -> None:
    assert hour_of(T0) == H13
    assert hour_of(T0 + 1) == H14
    assert hour_of(H14) == H14


def test_calls_of_one_key_model_and_hour_add_up_in_one_row_and_the_next_hour_opens_another() -> None:
    clock = Clock(T0)
    ledger = _ledger(clock)
    ledger.record(ALICE, "llama", Counts(10, 5, 2))
    ledger.record(ALICE, "llama", Counts(1, 1, 0))
    ledger.record(ALICE, "qwen", Counts(3, 4, 0))
    clock.at_s = T0 + 1  # 14:00:00
    ledger.record(ALICE, "llama", Counts(7, 0, 0))
    assert ledger._pending.rows == {
        ("key-a", "team-a", "llama", H13): [2, 11, 6, 2],  # requests, prompt, completion, cached
        ("key-a", "team-a", "qwen", H13): [1, 3, 4, 0],
        ("key-a", "team-a", "llama", H14): [1, 7, 0, 0],
    }


def test_a_call_without_a_key_is_counted_under_the_empty_key_and_the_anonymous_tenant() -> None:
    ledger = _ledger(Clock(T0))
    ledger.record(ANONYMOUS, "llama", Counts(1, 2, 0))
    ledger.record(Caller(tenant="ignored", key_id=""), "llama", Counts(1, 2, 0))
    assert ledger._pending.rows == {("", "anonymous", "llama", H13): [2, 2, 4, 0]}


def test_past_the_bound_the_oldest_row_is_dropped_and_counted() -> None:
    pending = PendingUsage(max_rows=2)
    pending.add(("a", "t", "m", H13), [1, 10, 0, 0])
    pending.add(("b", "t", "m", H13), [1, 20, 0, 0])
    pending.add(("a", "t", "m", H13), [1, 1, 0, 0])  # an existing row: no drop
    pending.add(("c", "t", "m", H14), [1, 30, 0, 0])
    assert list(pending.rows) == [("b", "t", "m", H13), ("c", "t", "m", H14)]
    assert pending.take_dropped() == 1 and pending.take_dropped() == 0
    assert pending.tokens_since("a", H13) == 0  # its tokens went with its row
    assert pending.tokens_since("b", H13) == 20


def test_a_failed_batch_goes_back_before_the_newer_rows_so_it_is_dropped_first() -> None:
    failed = PendingUsage(max_rows=2)
    failed.add(("old", "t", "m", H13), [1, 1, 0, 0])
    newer = PendingUsage(max_rows=2)
    newer.add(("new1", "t", "m", H14), [1, 1, 0, 0])
    newer.add(("old", "t", "m", H13), [1, 1, 0, 0])
    failed.merge_newer(newer)
    assert failed.rows == {("old", "t", "m", H13): [2, 2, 0, 0], ("new1", "t", "m", H14): [1, 1, 0, 0]}
    failed.add(("new2", "t", "m", H14), [1, 1, 0, 0])
    assert list(failed.rows) == [("new1", "t", "m", H14), ("new2", "t", "m", H14)]


def test_store_rows_carry_every_count() -> None:
    pending = PendingUsage(max_rows=10)
    pending.add(("k", "t", "m", H13), [3, 30, 20, 10])
    assert pending.store_rows() == [usage_store.UsageRow("k", "t", "m", H13, 3, 30, 20, 10)]


def test_tokens_used_adds_what_this_frontend_counted_to_the_stored_day_and_month_totals() -> None:
    clock = Clock(T0)
    ledger = _ledger(clock)
    day = dt.date(2026, 12, 4)
    ledger.use_totals(usage_store.KeyTotals(day, dt.date(2026, 12, 1), {"key-a": 100}, {"key-a": 1000}))
    ledger.record(ALICE, "llama", Counts(10, 5, 3))  # cached tokens are part of the prompt: not added again
    today, month = day_start_s(day), day_start_s(dt.date(2026, 12, 1))
    assert ledger.tokens_used("key-a", today) == 115
    assert ledger.tokens_used("key-a", month) == 1015
    assert ledger.tokens_used("key-b", today) == 0


def test_a_day_that_began_after_the_last_re_read_starts_from_this_frontends_own_counts() -> None:
    clock = Clock(day_start_s(dt.date(2026, 12, 5)) + 10)  # just past midnight UTC
    ledger = _ledger(clock)
    ledger.use_totals(
        usage_store.KeyTotals(dt.date(2026, 12, 4), dt.date(2026, 12, 1), {"key-a": 100}, {"key-a": 1000})
    )
    ledger.record(ALICE, "llama", Counts(1, 1, 0))
    assert ledger.tokens_used("key-a", day_start_s(dt.date(2026, 12, 5))) == 2
    assert ledger.tokens_used("key-a", day_start_s(dt.date(2026, 12, 1))) == 1002


@pytest.mark.parametrize(
    "since_s, expected",
    [
        (H14, 0),  # this hour's window: the 13:00 row is before it
        (H13, 7),
        (H13 + 1800, 7),  # the hour holding `since` counts whole: counts are kept per hour
    ],
)
def test_pending_tokens_count_from_the_hour_holding_since(since_s: float, expected: int) -> None:
    pending = PendingUsage(max_rows=10)
    pending.add(("k", "t", "m", H13), [1, 4, 3, 0])
    assert pending.tokens_since("k", since_s) == expected
