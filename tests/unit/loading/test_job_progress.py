"""Progress of one cold load: phases, node, bytes and install hints, and who is told of real work."""

from __future__ import annotations

from prometheus_client import REGISTRY

from corral.loading.job_progress import INSTALLING, LOADING, PENDING, STAGING, LoadProgress


def phase_count(phase: str) -> float:
    return REGISTRY.get_sample_value("corral_load_phase_duration_seconds_count", {"phase": phase}) or 0.0


def test_a_new_load_is_pending_with_nothing_moved() -> None:
    progress = LoadProgress()
    assert (progress.state, progress.bytes_sent, progress.total_bytes, progress.started_at_s) == (
        PENDING,
        0,
        0,
        None,
    )
    assert progress.install_json() is None


def test_every_kind_of_work_tells_the_listeners() -> None:
    progress, heard = LoadProgress(), []
    progress.listeners.append(lambda: heard.append(progress.state))
    progress.phase(STAGING)
    progress.on_file(1, 2, 100)
    progress.on_bytes(10, 100)
    progress.on_hash(5, 100)
    progress.on_install({"phase": "downloading"})
    progress.on_worker_busy(True)
    assert len(heard) == 6


def test_choosing_a_node_is_not_work() -> None:
    progress, heard = LoadProgress(), []
    progress.listeners.append(lambda: heard.append(1))
    before = progress.last_work_s
    progress.on_node("n1", "gpu-1", 2)
    assert (progress.node_id, progress.node_name, progress.replica_index) == ("n1", "gpu-1", 2)
    assert heard == [] and progress.last_work_s == before


def test_a_phase_change_is_counted_once_per_phase_left() -> None:
    progress = LoadProgress()
    pending, installing = phase_count(PENDING), phase_count(INSTALLING)
    progress.phase(PENDING)  # same phase: nothing ends
    assert phase_count(PENDING) == pending
    progress.phase(INSTALLING)
    progress.phase(STAGING)
    assert (phase_count(PENDING), phase_count(INSTALLING)) == (pending + 1, installing + 1)
    assert progress.state == STAGING


def test_a_new_file_resets_the_byte_counts() -> None:
    progress = LoadProgress()
    progress.on_bytes(50, 100)
    progress.on_file(2, 3, 400)
    assert (progress.file_index, progress.total_files, progress.bytes_sent, progress.total_bytes) == (
        2,
        3,
        0,
        400,
    )


def test_the_eta_anchor_is_the_first_moved_byte_and_stays() -> None:
    progress = LoadProgress()
    progress.on_bytes(0, 100)
    assert progress.started_at_s is None
    progress.on_bytes(1, 100)
    anchor = progress.started_at_s
    assert anchor is not None
    progress.on_bytes(90, 100)
    assert progress.started_at_s == anchor


def test_install_json_merges_the_last_event_and_the_busy_mark() -> None:
    progress = LoadProgress()
    progress.on_worker_busy(True)
    assert progress.install_json() == {"worker_busy": True}
    progress.on_install({"phase": "downloading", "percentage": 40.0})
    assert progress.install_json() == {"phase": "downloading", "percentage": 40.0, "worker_busy": True}
    progress.on_worker_busy(False)
    assert progress.install_json() == {"phase": "downloading", "percentage": 40.0}


def test_abandoning_needs_a_running_node_attempt() -> None:
    progress = LoadProgress()
    assert progress.abandon_node("stalled") is False
    reasons: list[str] = []

    def abandon(reason: str) -> bool:
        reasons.append(reason)
        return True

    progress.abandon = abandon
    assert progress.abandon_node("stalled") is True and reasons == ["stalled"]
    progress.abandon = lambda reason: False
    assert progress.abandon_node("again") is False


def test_the_phases_are_the_job_row_states() -> None:
    assert (PENDING, INSTALLING, STAGING, LOADING) == ("pending", "installing", "staging", "loading")
