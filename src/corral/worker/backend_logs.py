"""Bounded output of every backend process, per process key (`model#replica`), for operators.

Each key keeps its last `max_lines` stdout and stderr lines, timestamped and numbered (`seq`
grows per key, across restarts of the key's process, so a follower can join a snapshot and
the live stream without gaps or repeats). A line longer than `max_line_chars` is cut; at
most `max_keys` keys are kept (the least recently written one goes first), so a worker that
runs thousands of short-lived replicas does not grow without bound. The log of a process
that exited stays until its key is reused or pushed out: the lines of a backend that crashed
are what an operator needs most.

Listeners (the NATS live-line publisher) are called synchronously on every line; they must
only queue the line.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

MAX_LINES = 1000
MAX_LINE_CHARS = 2048
MAX_KEYS = 256
TRUNCATED_MARK = " …[cut]"


@dataclass(frozen=True)
class LogLine:
    seq: int
    process_key: str
    timestamp: float  # Unix seconds
    stream: str  # "stdout" | "stderr"
    text: str

    def to_dict(self) -> dict[str, object]:
        return {
            "seq": self.seq,
            "process_key": self.process_key,
            "timestamp": self.timestamp,
            "stream": self.stream,
            "text": self.text,
        }


@dataclass
class KeyLog:
    process_key: str
    backend: str
    lines: collections.deque[LogLine]
    next_seq: int = 1
    running: bool = True
    started_at: float = field(default_factory=time.time)

    @property
    def model_id(self) -> str:
        return self.process_key.rpartition("#")[0] or self.process_key


Listener = Callable[[str, LogLine], None]  # (model_id, line)


class BackendLogs:
    def __init__(
        self,
        max_lines: int = MAX_LINES,
        max_line_chars: int = MAX_LINE_CHARS,
        max_keys: int = MAX_KEYS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.max_lines, self.max_line_chars, self.max_keys = max_lines, max_line_chars, max_keys
        self._clock = clock
        self._logs: collections.OrderedDict[str, KeyLog] = collections.OrderedDict()
        self.listeners: list[Listener] = []

    def started(self, process_key: str, backend: str) -> None:
        """A process for `process_key` starts: its lines are appended after the previous run's."""
        log = self._logs.get(process_key)
        if log is None:
            log = KeyLog(process_key, backend, collections.deque(maxlen=self.max_lines))
            self._logs[process_key] = log
        log.backend, log.running, log.started_at = backend, True, self._clock()
        self._logs.move_to_end(process_key)
        while len(self._logs) > self.max_keys:
            self._logs.popitem(last=False)

    def rename(self, old_key: str, new_key: str) -> None:
        """A process now serves `new_key` (a spare handed over): its lines so far move with it, after any
        earlier run's lines of `new_key`."""
        moved = self._logs.pop(old_key, None)
        if moved is None:
            return
        target = self._logs.get(new_key)
        if target is None:
            target = KeyLog(new_key, moved.backend, collections.deque(maxlen=self.max_lines))
            self._logs[new_key] = target
        for line in moved.lines:
            target.lines.append(replace(line, seq=target.next_seq, process_key=new_key))
            target.next_seq += 1
        target.backend, target.running, target.started_at = moved.backend, moved.running, moved.started_at
        self._logs.move_to_end(new_key)

    def ended(self, process_key: str) -> None:
        log = self._logs.get(process_key)
        if log is not None:
            log.running = False

    def append(self, process_key: str, stream: str, text: str) -> LogLine:
        log = self._logs.get(process_key)
        if log is None:
            self.started(process_key, "")
            log = self._logs[process_key]
        if len(text) > self.max_line_chars:
            text = text[: self.max_line_chars] + TRUNCATED_MARK
        line = LogLine(log.next_seq, process_key, self._clock(), stream, text)
        log.next_seq += 1
        log.lines.append(line)
        for listener in self.listeners:
            listener(log.model_id, line)
        return line

    def tail(self, process_key: str, count: int) -> list[str]:
        log = self._logs.get(process_key)
        return [] if log is None else [line.text for line in list(log.lines)[-count:]]

    def models(self) -> list[dict[str, object]]:
        """One entry per model id: its process keys, backend, whether one runs, how many lines are kept."""
        out: dict[str, dict[str, object]] = {}
        for log in self._logs.values():
            entry = out.setdefault(
                log.model_id,
                {
                    "model_id": log.model_id,
                    "backend": log.backend,
                    "process_keys": [],
                    "running": False,
                    "lines": 0,
                },
            )
            keys = entry["process_keys"]
            assert isinstance(keys, list)
            keys.append(log.process_key)
            entry["running"] = bool(entry["running"]) or log.running
            entry["lines"] = int(str(entry["lines"])) + len(log.lines)
        return sorted(out.values(), key=lambda e: str(e["model_id"]))

    def lines(self, model_id: str, limit: int) -> list[LogLine]:
        """The last `limit` lines of every process of `model_id` (or of the exact key), oldest first."""
        found: list[LogLine] = []
        for log in self._logs.values():
            if log.model_id == model_id or log.process_key == model_id:
                found.extend(log.lines)
        found.sort(key=lambda line: (line.timestamp, line.process_key, line.seq))
        return found[-limit:] if limit > 0 else []

    def known(self, model_id: str) -> bool:
        return any(log.model_id == model_id or log.process_key == model_id for log in self._logs.values())
