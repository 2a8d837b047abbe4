"""Autoscaling on load, the pure decision: over target → +1 (after two passes), under → nothing, cooldown,
hysteresis band, schedules raising the minimum, scale to zero after idle — each with its reason in words."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import pytest

from corral.placement.autoscale import UP_PASSES, Counts, LoadSignal, Verdict, decide
from corral.placement.replica_plan import Plan, plan_replicas, replica_floor
from corral.placement.rules import Autoscale, AutoscaleRecord, SchedulingRule
from corral.placement.schedules import ScheduleWindow
from corral.placement.snapshot import NodeSnapshot, ReplicaSnapshot

NOW_S = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.UTC).timestamp()  # a Wednesday, noon UTC
ROOM = Counts(current=1, pending=0, capacity=2, high=3)


def rule(
    *, record: AutoscaleRecord | None = None, min_replicas: int = 1, **scaling: object
) -> SchedulingRule:
    base = SchedulingRule(id="r", model_name="m", min_replicas=min_replicas, max_replicas=3)
    fields = {"target_queue_wait_s": 2.0, **scaling}
    return replace(base, autoscale=Autoscale(**fields), record=record or AutoscaleRecord())  # type: ignore[arg-type]


def verdict(r: SchedulingRule, load: LoadSignal, counts: Counts = ROOM, now_s: float = NOW_S) -> Verdict:
    return decide(r, load, counts, now_s, default_cooldown_s=60.0)


SLOW = LoadSignal(wait_p95_s=4.2, depth=5, frontends=1)
QUIET = LoadSignal(wait_p95_s=0.2, frontends=1)


def test_over_target_on_two_consecutive_passes_adds_one_replica_and_says_why() -> None:
    first = verdict(rule(), SLOW)
    assert first.add == 0 and first.over_passes == 1
    assert first.reason == "queue wait p95 4.2 s > target 2 s: pass 1 of 2 over target: not scaled yet"
    second = verdict(rule(record=AutoscaleRecord(over_passes=first.over_passes)), SLOW)
    assert second.add == 1 and second.over_passes == UP_PASSES
    assert second.reason == "queue wait p95 4.2 s > target 2 s: +1 replica (1 → 2)"
    assert not second.allow_idle_stop  # never shrink while over target


def test_time_to_first_token_over_its_target_scales_too() -> None:
    r = rule(target_queue_wait_s=None, target_ttft_s=1.0, record=AutoscaleRecord(over_passes=1))
    v = verdict(r, LoadSignal(ttft_p95_s=3.0, frontends=2))
    assert v.add == 1 and v.reason == "TTFT p95 3 s > target 1 s: +1 replica (1 → 2)"


def test_under_target_adds_nothing_and_forgets_the_passes_over_it() -> None:
    v = verdict(rule(record=AutoscaleRecord(over_passes=1)), QUIET)
    assert (v.add, v.over_passes, v.allow_idle_stop) == (0, 0, True)
    assert v.reason.endswith("under target; idle replicas above 1 stop after their idle window")


def test_between_half_the_target_and_the_target_nothing_moves_either_way() -> None:
    v = verdict(rule(), LoadSignal(wait_p95_s=1.5, frontends=1))  # 0.5 × 2 s < 1.5 s ≤ 2 s
    assert (v.add, v.allow_idle_stop) == (0, False)
    assert "between 0.5 × target and target (hysteresis): not scaled" in v.reason


def test_within_the_cooldown_of_the_last_action_it_waits_and_names_the_end() -> None:
    record = AutoscaleRecord(over_passes=3, last_action_s=NOW_S - 10)
    v = verdict(rule(record=record, cooldown_s=30.0), SLOW)
    assert v.add == 0
    assert (
        v.reason
        == "queue wait p95 4.2 s > target 2 s: cooldown until 12:00:20 UTC (cooldown_s 30): not scaled"
    )
    later = verdict(rule(record=record, cooldown_s=30.0), SLOW, now_s=NOW_S + 21)
    assert later.add == 1


def test_the_cooldown_also_holds_back_scaling_down() -> None:
    record = AutoscaleRecord(last_action_s=NOW_S - 10)  # the frontend default: 60 s
    v = verdict(rule(record=record), QUIET, counts=replace(ROOM, current=2))
    assert not v.allow_idle_stop and "cooldown until 12:00:50 UTC before scaling down" in v.reason


@pytest.mark.parametrize(
    ("counts", "why"),
    [
        (Counts(3, 0, 1, 3), "at max_replicas 3: not scaled"),
        (Counts(1, 1, 1, 3), "1 replica(s) loading already: not scaled"),
        (Counts(1, 0, 0, 3), "no free replica slot on the matching nodes"),
    ],
)
def test_over_target_but_no_room_says_why_not(counts: Counts, why: str) -> None:
    v = verdict(rule(record=AutoscaleRecord(over_passes=1)), SLOW, counts)
    assert v.add == 0 and why in v.reason


def window(days: tuple[str, ...], start: str, end: str, tz: str = "UTC", low: int = 3) -> ScheduleWindow:
    return ScheduleWindow(days=days, start=start, end=end, tz=tz, min_replicas=low)


def at(text: str) -> float:
    return dt.datetime.fromisoformat(text).timestamp()


@pytest.mark.parametrize(
    ("w", "when", "holds"),
    [
        (window(("wed",), "09:00", "17:00"), "2026-12-02T12:00:00+00:00", True),
        (window(("wed",), "09:00", "17:00"), "2026-12-02T17:00:00+00:00", False),  # `to` is exclusive
        (window(("thu",), "09:00", "17:00"), "2026-12-02T12:00:00+00:00", False),  # another day
        # Paris is UTC+1 in December: 09:00-17:00 Paris is 08:00-16:00 UTC
        (window(("wed",), "09:00", "17:00", "Europe/Paris"), "2026-12-02T08:30:00+00:00", True),
        (window(("wed",), "09:00", "17:00", "Europe/Paris"), "2026-12-02T16:30:00+00:00", False),
        # wraps past midnight: Friday 22:00 → Saturday 06:00; the day is the day it starts
        (window(("fri",), "22:00", "06:00"), "2026-12-04T23:00:00+00:00", True),
        (window(("fri",), "22:00", "06:00"), "2026-12-05T05:59:00+00:00", True),
        (window(("fri",), "22:00", "06:00"), "2026-12-05T06:00:00+00:00", False),
        (
            window(("fri",), "22:00", "06:00"),
            "2026-12-04T05:00:00+00:00",
            False,
        ),  # Thursday's night: not listed
        # Sunday night wraps into Monday (the week wraps too)
        (window(("sun",), "20:00", "02:00"), "2026-12-07T01:00:00+00:00", True),
        # New York is UTC-5: Tuesday 23:30 there is Wednesday 04:30 UTC
        (window(("tue",), "23:00", "23:59", "America/New_York"), "2026-12-02T04:30:00+00:00", True),
    ],
)
def test_a_schedule_window_holds_in_its_own_time_zone_and_wraps_past_midnight(
    w: ScheduleWindow, when: str, holds: bool
) -> None:
    assert w.active(at(when)) is holds


def test_a_schedule_raises_the_minimum_while_it_holds_and_says_so() -> None:
    r = rule(schedules=(window(("wed",), "09:00", "17:00", low=3),))
    v = verdict(r, QUIET)
    assert v.low == 3 and v.reason.startswith("schedule wed 09:00-17:00 UTC raises the minimum to 3; ")
    assert verdict(r, QUIET, now_s=at("2026-12-02T18:00:00+00:00")).low == 1


def test_a_schedule_alone_needs_no_load_target() -> None:
    r = replace(rule(), autoscale=Autoscale(schedules=(window(("wed",), "00:00", "00:00", low=2),)))
    v = verdict(r, LoadSignal())
    assert v.low == 2 and v.busy_burst  # no load target: the older burst rule stays
    assert v.reason == "schedule wed 00:00-00:00 UTC raises the minimum to 2"


def test_min_zero_with_an_idle_window_scales_to_zero_and_without_keeps_one() -> None:
    assert verdict(rule(min_replicas=0, scale_down_idle_s=60.0), QUIET).floor == 0
    assert verdict(rule(min_replicas=0), QUIET).floor == 1


# The plan carries the verdict out over a snapshot.


def nodes(loaded: int, slots: int = 3) -> list[NodeSnapshot]:
    replicas = tuple(ReplicaSnapshot(model="m", replica_index=i, state="loaded") for i in range(loaded))
    return [
        NodeSnapshot(
            id="a", name="a", address="", http_address="", max_replicas_per_model=slots, replicas=replicas
        )
    ]


def plan(
    r: SchedulingRule, load: LoadSignal, loaded: int, *, idle_s: float = 0.0, busy: bool = False
) -> Plan:
    return plan_replicas(
        r,
        "m",
        {},
        nodes(loaded),
        in_flight=lambda n, x: 1.0 if busy else 0.0,
        idle_s=lambda n, x: idle_s,
        idle_window_s=r.autoscale.scale_down_idle_s or 300.0,
        autoscaler=lambda counts: decide(r, load, counts, NOW_S, default_cooldown_s=0.0),
    )


def test_the_plan_adds_a_replica_for_load_even_when_not_every_replica_is_busy() -> None:
    p = plan(rule(record=AutoscaleRecord(over_passes=1)), SLOW, loaded=2)
    assert p.load == 1 and p.verdict is not None and "+1 replica (2 → 3)" in p.verdict.reason


def test_with_a_load_target_every_replica_busy_alone_does_not_burst() -> None:
    assert plan(rule(), QUIET, loaded=1, busy=True).load == 0


def test_idle_replicas_go_down_to_zero_only_when_the_rule_allows_it() -> None:
    to_zero = plan(rule(min_replicas=0, scale_down_idle_s=60.0), LoadSignal(), loaded=2, idle_s=61.0)
    assert len(to_zero.stop) == 2 and {s.why for s in to_zero.stop} == {"idle"}
    not_yet = plan(rule(min_replicas=0, scale_down_idle_s=60.0), LoadSignal(), loaded=2, idle_s=59.0)
    assert not_yet.stop == ()
    keeps_one = plan(rule(min_replicas=0), LoadSignal(), loaded=2, idle_s=400.0)
    assert len(keeps_one.stop) == 1


def test_idle_replicas_stay_while_the_load_is_in_the_hysteresis_band() -> None:
    p = plan(rule(scale_down_idle_s=60.0), LoadSignal(wait_p95_s=1.5), loaded=3, idle_s=100.0)
    assert p.stop == ()


def test_a_schedule_window_loads_up_to_its_minimum() -> None:
    r = rule(schedules=(window(("wed",), "09:00", "17:00", low=3),))
    assert plan(r, QUIET, loaded=1).load == 2


def test_eviction_keeps_the_scheduled_minimum_while_the_window_holds() -> None:
    r = rule(schedules=(window(("wed",), "09:00", "17:00", low=3),))
    assert replica_floor(r, nodes(3), NOW_S) == 3
    assert replica_floor(r, nodes(3), at("2026-12-02T18:00:00+00:00")) == 1
    assert replica_floor(r, nodes(3)) == 1  # no clock: the rule's own minimum
