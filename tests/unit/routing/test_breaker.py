"""Circuit breakers of replicas: the state machine on an injected clock, and the view's picks that honour it."""

from __future__ import annotations

import pytest

from corral.routing.breaker import Breakers, BreakerSettings, BreakerState, avoided
from corral.routing.errors import ReplicasUnavailable
from corral.routing.pickers.policies import RoutePolicies
from corral.routing.replica import Replica, ReplicaView
from corral.telemetry.families import BREAKER_TRANSITIONS
from support.replicas import replicas

SETTINGS = BreakerSettings(failures=3, window_s=60.0, cooldown_s=30.0, cooldown_max_s=100.0)


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def _breakers() -> tuple[Breakers, Clock]:
    clock = Clock()
    return Breakers(SETTINGS, clock), clock


def _fail(breakers: Breakers, replica: Replica, times: int) -> BreakerState:
    state = BreakerState.CLOSED
    for _ in range(times):
        state = breakers.failed(replica, "UNAVAILABLE: simulated fault")
    return state


def _transitions(to: str) -> float:
    return BREAKER_TRANSITIONS.labels("m", to)._value.get()  # type: ignore[no-any-return]


def test_n_failures_in_a_row_open_the_breaker_and_the_cooldown_lets_one_trial_through() -> None:
    breakers, clock = _breakers()
    r = replicas(1)[0]
    opened_before = _transitions("open")
    assert _fail(breakers, r, 2) is BreakerState.CLOSED and breakers.may_pick(r.key)
    assert _fail(breakers, r, 1) is BreakerState.OPEN and not breakers.may_pick(r.key)
    assert _transitions("open") == opened_before + 1
    assert breakers.explain(r.key)["retry_in_s"] == 30.0
    clock.now_s += 29.9
    assert not breakers.may_pick(r.key)
    clock.now_s += 0.1
    assert breakers.state(r.key) is BreakerState.HALF_OPEN and breakers.may_pick(r.key)
    breakers.picked(r.key)  # the trial is in flight: nobody else gets through
    assert not breakers.may_pick(r.key) and breakers.explain(r.key)["trial_in_flight"] is True


def test_a_successful_trial_closes_the_breaker() -> None:
    breakers, clock = _breakers()
    r = replicas(1)[0]
    _fail(breakers, r, 3)
    clock.now_s += 30
    breakers.picked(r.key)
    closed_before = _transitions("closed")
    breakers.succeeded(r)
    assert breakers.state(r.key) is BreakerState.CLOSED and not breakers.tripped
    assert _transitions("closed") == closed_before + 1
    assert breakers.explain(r.key) == {"state": "closed", "failures": 0}


def test_a_failed_trial_reopens_with_the_cooldown_doubled_up_to_the_cap() -> None:
    breakers, clock = _breakers()
    r = replicas(1)[0]
    _fail(breakers, r, 3)
    for cooldown_s in (60.0, 100.0, 100.0):  # 30 s, then doubled, then capped at 100 s
        clock.now_s += 1000
        breakers.picked(r.key)
        assert breakers.failed(r, "INTERNAL: boom") is BreakerState.OPEN
        assert breakers.explain(r.key)["retry_in_s"] == cooldown_s
    clock.now_s += 1000
    breakers.succeeded(r)  # closed: the next opening starts from the base cooldown again
    _fail(breakers, r, 3)
    assert breakers.explain(r.key)["retry_in_s"] == 30.0


def test_failures_spread_wider_than_the_window_do_not_open_the_breaker() -> None:
    breakers, clock = _breakers()
    r = replicas(1)[0]
    _fail(breakers, r, 2)
    clock.now_s += 61  # past the window of the first failure: the count starts again
    assert _fail(breakers, r, 2) is BreakerState.CLOSED
    assert _fail(breakers, r, 1) is BreakerState.OPEN


def test_a_success_ends_the_streak() -> None:
    breakers, _ = _breakers()
    r = replicas(1)[0]
    _fail(breakers, r, 2)
    breakers.succeeded(r)
    assert _fail(breakers, r, 2) is BreakerState.CLOSED


def test_a_straggler_success_while_open_does_not_shorten_the_cooldown() -> None:
    breakers, _ = _breakers()
    r = replicas(1)[0]
    _fail(breakers, r, 3)
    breakers.succeeded(r)  # a call sent before the breaker opened
    assert breakers.state(r.key) is BreakerState.OPEN


def test_an_abandoned_trial_frees_the_trial_for_the_next_request() -> None:
    breakers, clock = _breakers()
    r = replicas(1)[0]
    _fail(breakers, r, 3)
    clock.now_s += 30
    breakers.picked(r.key)
    breakers.abandoned(r)  # the client went away before a verdict
    assert breakers.may_pick(r.key)


def test_a_health_probe_that_passes_makes_an_open_breaker_half_open_at_once() -> None:
    breakers, clock = _breakers()
    r = replicas(1)[0]
    _fail(breakers, r, 3)
    assert breakers.probe_due([r]) == [r]
    assert breakers.probe_due([r]) == []  # one probe per replica per PROBE_INTERVAL_S
    breakers.probe_passed(r)
    assert breakers.state(r.key) is BreakerState.HALF_OPEN and breakers.may_pick(r.key)
    clock.now_s += 1
    assert breakers.probe_due([r]) == []  # not open any more


def test_a_forgotten_replica_comes_back_closed() -> None:
    breakers, _ = _breakers()
    r = replicas(1)[0]
    _fail(breakers, r, 3)
    breakers.forget(r.key)
    assert breakers.state(r.key) is BreakerState.CLOSED and not breakers.tripped


def _view() -> tuple[ReplicaView, list[Replica], Breakers, Clock]:
    breakers, clock = _breakers()
    view = ReplicaView(policies=RoutePolicies(prefix_cache_default=False), breakers=breakers)
    return view, [view.add(r) for r in replicas(2)], breakers, clock


def test_the_view_never_picks_a_replica_whose_breaker_is_open() -> None:
    view, rs, breakers, _ = _view()
    _fail(breakers, rs[0], 3)
    assert {view.pick("m").key for _ in range(20)} == {rs[1].key}  # type: ignore[union-attr]


def test_with_every_replica_open_the_pick_raises_replicas_unavailable_naming_the_cooldown() -> None:
    view, rs, breakers, clock = _view()
    _fail(breakers, rs[0], 3)
    clock.now_s += 10
    _fail(breakers, rs[1], 3)
    with pytest.raises(ReplicasUnavailable) as caught:
        view.pick("m")
    assert caught.value.retry_after_s == 20  # the first breaker to cool down
    message = str(caught.value)
    assert "CORRAL_BREAKER_COOLDOWN" in message and "retry in 20s" in message
    assert "node0: UNAVAILABLE: simulated fault" in message


def test_a_lone_replica_whose_breaker_is_open_is_not_picked_either() -> None:
    breakers, _ = _breakers()
    view = ReplicaView(breakers=breakers)
    r = view.add(replicas(1)[0])
    _fail(breakers, r, 3)
    with pytest.raises(ReplicasUnavailable):
        view.pick("m")


def test_the_half_open_replica_takes_exactly_one_trial_pick() -> None:
    view, rs, breakers, clock = _view()
    _fail(breakers, rs[0], 3)
    _fail(breakers, rs[1], 3)
    clock.now_s += 30
    first = view.pick("m")
    second = view.pick("m")
    assert {first.key, second.key} == {rs[0].key, rs[1].key}  # type: ignore[union-attr]
    with pytest.raises(ReplicasUnavailable):  # both trials in flight
        view.pick("m")


def test_a_retry_avoids_the_replica_it_failed_on_unless_it_is_the_only_one() -> None:
    view, rs, _, _ = _view()
    token = avoided.set(frozenset({rs[0].key}))
    try:
        assert {view.pick("m").key for _ in range(20)} == {rs[1].key}  # type: ignore[union-attr]
        view.remove(rs[1])
        assert view.pick("m") is rs[0]  # the only one left: retried there rather than loaded again
    finally:
        avoided.reset(token)


def test_a_replica_that_leaves_the_view_loses_its_breaker() -> None:
    view, rs, breakers, _ = _view()
    _fail(breakers, rs[0], 3)
    view.remove(rs[0])
    assert breakers.state(rs[0].key) is BreakerState.CLOSED and not breakers.tripped


def test_an_open_breaker_trips_only_its_own_replicas_for_the_hot_path() -> None:
    """`tripped_among` (Router.checkout_now): one model's sick replica leaves other models' warm case alone."""
    breakers, _clock = _breakers()
    sick, healthy = replicas(2)
    assert not breakers.tripped_among([sick, healthy])
    _fail(breakers, sick, 3)
    assert breakers.tripped and breakers.tripped_among([sick, healthy]) and breakers.tripped_among([sick])
    assert not breakers.tripped_among([healthy]) and not breakers.tripped_among([])
