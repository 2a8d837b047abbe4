"""Health-monitor status transitions: a never-approved node never becomes healthy."""

from __future__ import annotations

import pytest

from corral.nodes.status import next_status

THRESHOLD_S = 300.0
NOW_S = 10_000.0


def decide(
    status: str,
    *,
    approved: bool = True,
    beat_age_s: float = 10.0,
    changed_age_s: float = 1_000.0,
    watching_since_s: float = 0.0,
) -> str | None:
    return next_status(
        status,
        approved=approved,
        last_beat_s=NOW_S - beat_age_s,
        status_changed_s=NOW_S - changed_age_s,
        now_s=NOW_S,
        stale_threshold_s=THRESHOLD_S,
        watching_since_s=watching_since_s,
    )


@pytest.mark.parametrize("status", ["healthy", "unhealthy", "draining", "pending"])
def test_a_node_without_a_fresh_beat_past_the_threshold_goes_offline(status: str) -> None:
    assert decide(status, beat_age_s=301.0) == "offline"


def test_an_offline_node_stays_offline_while_stale() -> None:
    assert decide("offline", beat_age_s=301.0) is None


def test_an_approved_offline_node_that_beats_again_is_healthy() -> None:
    assert decide("offline") == "healthy"


def test_a_never_approved_node_that_went_stale_comes_back_pending_not_healthy() -> None:
    assert decide("offline", approved=False) == "pending"


def test_a_fresh_pending_node_stays_pending() -> None:
    assert decide("pending", approved=False) is None


def test_a_node_that_deregistered_after_its_last_beat_is_not_revived_by_that_beat() -> None:
    assert decide("offline", beat_age_s=10.0, changed_age_s=5.0) is None


def test_no_node_is_judged_stale_before_one_threshold_after_the_monitor_started() -> None:
    assert decide("healthy", beat_age_s=1_000.0, watching_since_s=NOW_S - 100.0) is None
    assert decide("healthy", beat_age_s=1_000.0, watching_since_s=NOW_S - 400.0) == "offline"


def test_the_monitor_start_never_counts_as_a_beat_for_recovery() -> None:
    assert decide("offline", beat_age_s=1_000.0, changed_age_s=500.0, watching_since_s=NOW_S - 1.0) is None


def test_a_node_an_admin_drained_comes_back_draining_after_going_stale() -> None:
    assert (
        next_status(
            "offline",
            approved=True,
            last_beat_s=NOW_S - 10.0,
            status_changed_s=NOW_S - 1_000.0,
            now_s=NOW_S,
            stale_threshold_s=THRESHOLD_S,
            admin_drained=True,
        )
        == "draining"
    )
