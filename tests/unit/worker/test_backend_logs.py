"""The worker's bounded per-process backend log and the snapshot size cap (pure)."""

from __future__ import annotations

import json

from corral.worker.backend_logs import TRUNCATED_MARK, BackendLogs, LogLine
from corral.worker.log_handlers import fit


def test_lines_are_bounded_numbered_and_kept_across_restarts() -> None:
    logs = BackendLogs(max_lines=3)
    logs.started("m#0", "simulator")
    for i in range(5):
        logs.append("m#0", "stdout", f"line {i}")
    logs.ended("m#0")
    assert [line.text for line in logs.lines("m", 10)] == ["line 2", "line 3", "line 4"]
    assert [line.seq for line in logs.lines("m", 10)] == [3, 4, 5]
    logs.started("m#0", "simulator")  # the key's next process: numbering goes on, old lines stay
    logs.append("m#0", "stderr", "again")
    assert [(line.seq, line.stream) for line in logs.lines("m#0", 2)] == [(5, "stdout"), (6, "stderr")]
    assert logs.models() == [
        {"model_id": "m", "backend": "simulator", "process_keys": ["m#0"], "running": True, "lines": 3}
    ]


def test_long_lines_are_cut_and_old_keys_pushed_out() -> None:
    logs = BackendLogs(max_line_chars=10, max_keys=2)
    line = logs.append("a#0", "stderr", "x" * 100)
    assert line.text == "x" * 10 + TRUNCATED_MARK
    logs.append("b#0", "stderr", "b")
    logs.append("c#0", "stderr", "c")
    assert not logs.known("a") and logs.known("b") and logs.known("c#0")


def test_replicas_of_one_model_merge_by_time_and_listeners_see_every_line() -> None:
    clock = iter(range(100))
    logs = BackendLogs(clock=lambda: float(next(clock)))
    seen: list[tuple[str, str]] = []
    logs.listeners.append(lambda model, line: seen.append((model, line.text)))
    logs.append("m#0", "stdout", "first")
    logs.append("m#1", "stdout", "second")
    logs.append("other#0", "stdout", "not m")
    logs.append("m#0", "stdout", "third")
    assert [line.text for line in logs.lines("m", 10)] == ["first", "second", "third"]
    assert [line.text for line in logs.lines("m#1", 10)] == ["second"]
    assert seen[1] == ("m", "second") and len(seen) == 4
    assert logs.lines("m", 0) == []


def test_a_snapshot_keeps_the_newest_lines_that_fit() -> None:
    lines = [LogLine(i, "m#0", 0.0, "stdout", "y" * 100) for i in range(1, 101)]
    kept = fit(lines, budget=2000)
    assert kept and kept[-1]["seq"] == 100 and kept[0]["seq"] > 80
    assert sum(len(json.dumps(k)) + 1 for k in kept) <= 2000


def test_a_spare_process_handed_over_brings_its_lines_after_the_keys_earlier_run() -> None:
    logs = BackendLogs()
    logs.append("m#0", "stderr", "earlier run")
    logs.ended("m#0")
    logs.started("spare:simulator", "simulator")
    logs.append("spare:simulator", "stderr", "starting")
    logs.rename("spare:simulator", "m#0")
    assert [(line.seq, line.process_key, line.text) for line in logs.lines("m#0", 10)] == [
        (1, "m#0", "earlier run"),
        (2, "m#0", "starting"),
    ]
    assert not logs.known("spare:simulator")
    assert logs.models()[0]["running"] is True
    assert logs.append("m#0", "stdout", "next").seq == 3
    logs.rename("gone", "m#1")  # nothing to move: nothing made up
    assert not logs.known("m#1")
