from __future__ import annotations

import pytest

from corral.loading.job_hold import LoadHold, base_budget_s
from corral.loading.request_status import eta_s, loading_message, loading_object, progress_pct, retry_after_s
from corral.store.load_jobs import JobSnapshot

MIB = 1 << 20


def job(
    state: str = "staging",
    sent: int = 0,
    total: int = 0,
    index: int = 0,
    files: int = 0,
    moving_s: float | None = None,
    node: str = "gpu-7",
) -> JobSnapshot:
    return JobSnapshot(
        tracking_key="llama",
        state=state,
        owner_replica="o",
        node_id="n",
        node_name=node,
        bytes_sent=sent,
        total_bytes=total,
        file_index=index,
        total_files=files,
        last_error="",
        error_kind="",
        silent_s=0.0,
        moving_s=moving_s,
    )


@pytest.mark.parametrize(
    "snapshot, pct",
    [
        (job(sent=0, total=0), 0.0),  # nothing known yet
        (job(sent=50, total=100, index=1, files=1), 50.0),
        (job(sent=50, total=100, index=2, files=4), 37.5),  # (1 file done + half of the 2nd) / 4
    ],
)
def test_progress_spans_all_files(snapshot: JobSnapshot, pct: float) -> None:
    assert progress_pct(snapshot) == pct


@pytest.mark.parametrize(
    "snapshot",
    [
        job(state="loading", sent=50, total=100, moving_s=10),  # not staging
        job(sent=0, total=100, moving_s=10),  # nothing moved
        job(sent=50, total=100, moving_s=0.5),  # too early for a rate
        job(sent=50, total=100, moving_s=None),
    ],
)
def test_eta_is_omitted_until_the_rate_means_something(snapshot: JobSnapshot) -> None:
    assert eta_s(snapshot) is None
    assert "eta_seconds" not in loading_object(snapshot)


def test_eta_comes_from_the_observed_rate() -> None:
    snapshot = job(sent=41 * MIB, total=100 * MIB, index=1, files=1, moving_s=460)
    assert eta_s(snapshot) == pytest.approx(59 * MIB / (41 * MIB / 460))
    assert loading_message(snapshot) == "model llama is staging on node gpu-7 (41%, ETA ~11m)"
    assert loading_object(snapshot)["eta_seconds"] == pytest.approx(662.0, abs=0.1)


@pytest.mark.parametrize(
    "snapshot, budget_s, expected",
    [
        (job(), 60.0, 60),  # no ETA ⇒ the wait budget
        (job(), 1.0, 5),  # clamped up to 5 s
        (job(sent=1, total=10_000, moving_s=10), 60.0, 300),  # huge ETA clamped to 300 s
    ],
)
def test_retry_after_is_clamped_to_5_to_300_seconds(
    snapshot: JobSnapshot, budget_s: float, expected: int
) -> None:
    assert retry_after_s(snapshot, budget_s) == expected


def test_message_without_bytes_names_state_and_node() -> None:
    assert loading_message(job(state="installing")) == "model llama is installing on node gpu-7"


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


def test_install_progress_from_a_worker_is_bounded_before_it_is_shown() -> None:
    from corral.loading.job_placement import EVENT_TEXT_MAX_CHARS, _shown

    shown = _shown(
        {
            "phase": "downloading",
            "file_name": "x" * 100_000,
            "percentage": 1e308,
            "current": 5,
            "extra": "ignored",
            "total": "412 MB",
        }
    )
    assert shown == {
        "phase": "downloading",
        "file_name": "x" * EVENT_TEXT_MAX_CHARS,
        "total": "412 MB",
        "percentage": 100.0,
    }


def test_the_loading_object_shows_install_progress_and_worker_busy() -> None:
    import dataclasses

    snapshot = dataclasses.replace(
        job("installing"), install={"phase": "downloading", "percentage": 40.0, "worker_busy": True}
    )
    body = loading_object(snapshot)
    assert body["install"]["phase"] == "downloading" and body["worker_busy"] is True
    assert "worker busy" in loading_message(snapshot)
    assert "install" not in loading_object(job("installing"))
