"""The load progress view: a bar and a readable phase line; a line per step without a terminal."""

from __future__ import annotations

import io

from corral.cli.progress import LoadView, bar, describe


def test_bar_is_bounded() -> None:
    assert bar(0, 10) == "[..........]"
    assert bar(55, 10) == "[#####.....]"
    assert bar(250, 10) == "[##########]"


def test_describe_names_phase_node_bytes_and_eta() -> None:
    status = {
        "state": "staging",
        "node": "gpu-1",
        "progress": 25.0,
        "bytes_sent": 2_000_000,
        "total_bytes": 8_000_000,
        "file_index": 1,
        "total_files": 2,
        "eta_seconds": 3.4,
    }
    assert describe(status) == "staging on gpu-1, 2.0 MB of 8.0 MB (file 1/2), ETA 3s"
    assert describe({"state": "pending", "total_bytes": 0}) == "pending"


def test_without_a_terminal_a_line_per_phase_or_ten_percent() -> None:
    out = io.StringIO()
    view = LoadView("m", out, tty=False)
    for state, pct in [
        ("pending", 0),
        ("staging", 1),
        ("staging", 5),
        ("staging", 12),
        ("loading", 100),
        ("loading", 100),
    ]:
        view.update({"state": state, "progress": pct})
    view.finish("m ready on w1#0")
    lines = out.getvalue().splitlines()
    assert len(lines) == 5 and "\r" not in out.getvalue() and lines[-1] == "m ready on w1#0"


def test_on_a_terminal_the_line_is_redrawn_in_place() -> None:
    out = io.StringIO()
    view = LoadView("m", out, tty=True)
    view.update({"state": "staging", "progress": 10})
    view.update({"state": "staging", "progress": 60})
    view.finish("m ready")
    text = out.getvalue()
    assert text.count("\r") >= 3 and text.endswith("m ready\n")
