"""How activity rows read to an operator: state labels, the fan-out roll-up, the reference's shapes (pure)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from corral.frontend.admin.operation_views import history_record, job_view, live_entry, state_label
from corral.store import operations

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def row(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "op-1",
        "parent_id": None,
        "gallery_element_name": "simulator",
        "op_type": operations.BACKEND_INSTALL,
        "status": operations.PENDING,
        "progress": 0.0,
        "phase": "",
        "current_bytes": 0,
        "total_bytes": 0,
        "message": "",
        "error": "",
        "file_name": "",
        "total_file_size": "",
        "downloaded_file_size": "",
        "node_id": "n1",
        "node_name": "w1",
        "cancellable": False,
        "worker_busy": False,
        "attempts": 0,
        "is_backend_op": True,
        "created_at": NOW,
        "started_at": None,
        "finished_at": None,
    }
    base.update(over)
    return base


def test_labels() -> None:
    assert state_label(row()) == "Queued"
    assert state_label(row(status=operations.PROCESSING)) == "Installing"
    assert state_label(row(status=operations.DOWNLOADING)) == "Downloading"
    assert state_label(row(status=operations.PROCESSING, worker_busy=True)) == "Worker busy"
    assert state_label(row(status=operations.COMPLETED, finished_at=NOW)) == "Done"
    assert state_label(row(status=operations.FAILED)) == "Failed"


def test_a_fanout_job_rolls_up_its_nodes() -> None:
    parent = row(id="job", op_type=operations.FANOUT, node_id="", node_name="", status=operations.PROCESSING)
    kids = [
        row(id="a", status=operations.COMPLETED, finished_at=NOW, progress=1.0),
        row(id="b", node_name="w2", status=operations.DOWNLOADING, progress=0.5, file_name="venv.tar"),
        row(id="c", node_name="w3", status=operations.PROCESSING, worker_busy=True),
        row(id="d", node_name="w4", status=operations.FAILED, finished_at=NOW, error="boom"),
    ]
    view = job_view(parent, kids)
    assert view["summary"] == "1 of 4 nodes done, 1 failed, 1 worker(s) busy"
    assert [n["state"] for n in view["nodes"]] == ["Done", "Downloading", "Worker busy", "Failed"]
    assert view["nodes"][1]["file_name"] == "venv.tar" and view["nodes"][3]["error"] == "boom"
    assert view["processed"] is False and view["progress"] == 37.5
    entry = live_entry(parent, kids)
    assert entry["message"] == view["summary"] and entry["isBackend"] and "nodeID" not in entry


def test_reference_shapes() -> None:
    live = live_entry(row())
    for key in (
        "id",
        "name",
        "fullName",
        "jobID",
        "progress",
        "taskType",
        "isDeletion",
        "isBackend",
        "isQueued",
        "cancellable",
        "message",
        "nodeID",
        "nodeName",
        "currentBytes",
        "totalBytes",
    ):
        assert key in live
    done = history_record(row(status=operations.FAILED, error="x", finished_at=NOW))
    assert done["outcome"] == "failed" and done["error"] == "x" and done["finishedAt"] == NOW.isoformat()
