"""One waiting request's view of a load job: progress, ETA, Retry-After, the message and the loading object."""

from __future__ import annotations

import dataclasses

import pytest

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


def test_the_loading_object_shows_install_progress_and_worker_busy() -> None:
    snapshot = dataclasses.replace(
        job("installing"), install={"phase": "downloading", "percentage": 40.0, "worker_busy": True}
    )
    body = loading_object(snapshot)
    assert body["install"]["phase"] == "downloading" and body["worker_busy"] is True
    assert "worker busy" in loading_message(snapshot)
    assert "install" not in loading_object(job("installing"))
