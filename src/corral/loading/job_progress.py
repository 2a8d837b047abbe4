"""Progress of one cold load: the phase, the node, bytes moved — what waiters and the 503 body show.

Written by the load's steps (synchronously, no I/O); read by the job heartbeat, which copies it
to the `model_load_jobs` row, and by the cold-load hold, which extends on real staging work.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from corral.telemetry.families import LOAD_PHASE_SECONDS

PENDING, INSTALLING, STAGING, LOADING, FAILED = "pending", "installing", "staging", "loading", "failed"


@dataclass
class LoadProgress:
    state: str = PENDING
    node_id: str = ""
    node_name: str = ""
    replica_index: int = 0
    bytes_sent: int = 0
    total_bytes: int = 0
    file_index: int = 0
    total_files: int = 0
    started_at_s: float | None = None  # wall clock of the first moved byte (ETA anchor)
    install: dict[str, Any] | None = None  # the worker's last backend install progress event (a hint)
    worker_busy: bool = False  # the install was not answered within the install timeout; still working
    last_work_s: float = field(default_factory=time.monotonic)
    phase_since_s: float = field(default_factory=time.monotonic)  # the current phase began (metrics)
    listeners: list[Callable[[], None]] = field(default_factory=list, repr=False)
    abandon: Callable[[str], bool] | None = field(default=None, repr=False)  # set by the running node attempt

    def _worked(self) -> None:
        self.last_work_s = time.monotonic()
        for listener in self.listeners:
            listener()

    def phase(self, state: str) -> None:
        if state != self.state:
            self.end_phase()
        self.state = state
        self._worked()

    def end_phase(self) -> None:
        """Count the time spent in the current phase (`corral_load_phase_duration_seconds`)."""
        now_s = time.monotonic()
        LOAD_PHASE_SECONDS.labels(self.state).observe(now_s - self.phase_since_s)
        self.phase_since_s = now_s

    def on_node(self, node_id: str, node_name: str, replica_index: int) -> None:
        self.node_id, self.node_name, self.replica_index = node_id, node_name, replica_index

    def on_file(self, index: int, total_files: int, total_bytes: int) -> None:
        """Staging moved on to file `index` (1-based) of `total_files`."""
        self.file_index, self.total_files = index, total_files
        self.bytes_sent, self.total_bytes = 0, total_bytes
        self._worked()

    def on_bytes(self, bytes_sent: int, total_bytes: int) -> None:
        """Bytes of the current file on the worker (seeded with a resume offset)."""
        if bytes_sent > 0 and self.started_at_s is None:
            self.started_at_s = time.time()
        self.bytes_sent, self.total_bytes = bytes_sent, total_bytes
        self._worked()

    def on_install(self, event: dict[str, Any]) -> None:
        """The worker reported backend install progress (phase, file, current/total, percentage)."""
        self.install = event
        self._worked()

    def on_worker_busy(self, busy: bool) -> None:
        self.worker_busy = busy
        self._worked()

    def install_json(self) -> dict[str, Any] | None:
        """What the job row keeps for the 503 body: the install progress and the worker-busy mark."""
        if self.install is None and not self.worker_busy:
            return None
        return {**(self.install or {}), **({"worker_busy": True} if self.worker_busy else {})}

    def abandon_node(self, reason: str) -> bool:
        """Give up the current node (the load moves to the next one); False when no node attempt runs."""
        return self.abandon is not None and self.abandon(reason)

    def on_hash(self, _done_bytes: int, _total_bytes: int) -> None:
        """Verify hashing of a file already on the worker: no bytes move, but it is real work."""
        self._worked()
