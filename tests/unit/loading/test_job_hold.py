"""The hold a load job keeps on its waiters: base budget, stall window, load budget, absolute cap."""

from __future__ import annotations

from corral.loading.job_hold import LoadHold, base_budget_s


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def test_base_budget_defaults_to_25_minutes_and_grows_with_the_timeouts() -> None:
    assert base_budget_s(15 * 60, 5 * 60) == 25 * 60
    assert base_budget_s(30 * 60, 28 * 60) == 63 * 60


def test_staging_expires_only_after_a_silent_stall_window() -> None:
    clock = Clock()
    hold = LoadHold(base_s=1500, stall_s=300, clock=clock)
    hold.enter("staging")
    for _ in range(10):  # 50 minutes of slow but steady transfer
        clock.now_s += 299
        hold.worked()
        assert hold.expired_reason() is None
    clock.now_s += 301
    assert "staging made no progress for 5m" in (hold.expired_reason() or "")


def test_verify_hashing_counts_as_staging_progress() -> None:
    clock = Clock()
    hold = LoadHold(base_s=1500, stall_s=300, clock=clock)
    hold.enter("staging")
    for _ in range(8):  # six-plus minutes of hashing shards already on the worker, no bytes moved
        clock.now_s += 60
        hold.worked()  # LoadProgress.on_hash feeds this
    assert hold.expired_reason() is None


def test_the_load_phase_widens_the_hold_by_the_load_budget_plus_slack() -> None:
    clock = Clock()
    hold = LoadHold(base_s=1500, stall_s=300, clock=clock)
    clock.now_s = 1400
    hold.enter("loading", load_budget_s=1700)  # a 70 GiB checkpoint: 28m20s
    clock.now_s += 1700 + 299
    assert hold.expired_reason() is None
    clock.now_s += 2
    assert "LOCALAI_NATS_MODEL_LOAD_TIMEOUT" in (hold.expired_reason() or "")


def test_the_absolute_cap_ends_the_hold_whatever_progress_arrives() -> None:
    clock = Clock()
    hold = LoadHold(base_s=1500, stall_s=300, clock=clock)
    hold.enter("staging")
    while clock.now_s < 24 * 3600:
        clock.now_s += 200
        hold.worked()
    assert "absolute cap of 24h" in (hold.expired_reason() or "")


def test_before_staging_the_base_budget_names_its_knobs() -> None:
    clock = Clock()
    hold = LoadHold(base_s=1500, stall_s=300, clock=clock)
    hold.enter("installing")
    clock.now_s = 1501
    assert "LOCALAI_NATS_BACKEND_INSTALL_TIMEOUT" in (hold.expired_reason() or "")


def test_moving_to_the_next_node_after_a_stall_gives_it_a_fresh_base_budget() -> None:
    clock = Clock()
    hold = LoadHold(base_s=1500, stall_s=300, clock=clock)
    hold.enter("staging")
    clock.now_s = 301
    assert "staging made no progress" in (hold.expired_reason() or "")  # the node stalled: it is abandoned
    hold.enter("pending")  # the next node: placing, installing again
    clock.now_s = 301 + 1499
    assert hold.expired_reason() is None
    clock.now_s += 2
    assert "LOCALAI_NATS_BACKEND_INSTALL_TIMEOUT" in (hold.expired_reason() or "")
