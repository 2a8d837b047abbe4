"""What the job shows of a worker's install progress."""

from __future__ import annotations

from corral.loading.job_placement import EVENT_TEXT_MAX_CHARS, _shown


def test_install_progress_from_a_worker_is_bounded_before_it_is_shown() -> None:
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
