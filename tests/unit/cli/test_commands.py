"""`corral activity` rows from the operations API's shapes: live entries with per-node rows, history."""

from __future__ import annotations

from corral.cli.commands import _operation_rows
from corral.cli.tables import table


def test_a_fan_out_install_shows_a_row_per_node() -> None:
    live = [
        {
            "id": "op1",
            "name": "llama-cpp",
            "taskType": "backend_install",
            "progress": 50,
            "state": "running",
            "message": "1 of 2 nodes done",
            "nodeName": "",
            "nodes": [
                {"node_name": "gpu-1", "status": "completed", "state": "done", "progress": 100.0},
                {"node_name": "gpu-2", "state": "downloading", "progress": 1.5, "phase": "download"},
            ],
        },
        {
            "id": "staging:m",
            "name": "m",
            "taskType": "staging",
            "progress": 40,
            "isQueued": False,
            "phase": "staging",
            "nodeName": "gpu-1",
            "message": "staging m on gpu-1",
        },
    ]
    rows = _operation_rows(live)
    assert rows[0][:5] == ["llama-cpp", "backend_install", "running", "50%", "-"]
    assert rows[1][:4] == ["  - gpu-1", "", "done", "100.0%"] and rows[2][2:5] == [
        "downloading",
        "1.5%",
        "download",
    ]
    assert rows[3][:5] == ["m", "staging", "staging", "40%", "gpu-1"]
    assert table(["A", "B", "C", "D", "E", "F"], rows).count("\n") == 4


def test_history_records_show_their_outcome_and_error() -> None:
    rows = _operation_rows(
        [
            {
                "id": "op2",
                "name": "vllm",
                "taskType": "backend_delete",
                "outcome": "failed",
                "error": "disk full",
                "nodeName": "gpu-3",
            }
        ]
    )
    assert rows == [["vllm", "backend_delete", "error", "-", "gpu-3", "disk full"]]
