"""The cold-load hold: how long one load may keep a model's load job (specification: "cold-load lock ceiling").

Pure logic with an injected clock. Before staging the base budget applies (node selection and
install report no progress); while staging, the hold expires only after a stall window with no
real work (uploaded bytes or verify hashing); entering LoadModel widens it by the load budget
plus slack; moving to another node (placing, installing again) restarts the base budget, and an
absolute cap ends it regardless.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from corral.config.parse import format_duration_s
from corral.loading.job_progress import LOADING, STAGING

SLACK_S = 5 * 60.0
BASE_FLOOR_S = 25 * 60.0
ABSOLUTE_CAP_S = 24 * 3600.0


def base_budget_s(install_timeout_s: float, load_timeout_s: float) -> float:
    """max(install + load + 5m, 25m): with the defaults 15m + 5m + 5m = 25m."""
    return max(install_timeout_s + load_timeout_s + SLACK_S, BASE_FLOOR_S)


@dataclass
class LoadHold:
    base_s: float
    stall_s: float
    cap_s: float = ABSOLUTE_CAP_S
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self.started_s = self.clock()
        self.deadline_s = self.started_s + self.base_s
        self.phase = ""
        self._load_budget_s = 0.0

    def enter(self, phase: str, load_budget_s: float = 0.0) -> None:
        now = self.clock()
        self.phase = phase
        if phase == STAGING:
            self.deadline_s = now + self.stall_s
        elif phase == LOADING:
            self._load_budget_s = load_budget_s
            self.deadline_s = max(self.deadline_s, now + load_budget_s + SLACK_S)
        else:  # placing or installing (again, on the next node): the base budget from now
            self.deadline_s = max(self.deadline_s, now + self.base_s)

    def worked(self) -> None:
        """Real staging work happened (bytes uploaded, a verify-hash chunk)."""
        if self.phase == STAGING:
            self.deadline_s = self.clock() + self.stall_s

    def expired_reason(self) -> str | None:
        now = self.clock()
        if now >= self.started_s + self.cap_s:
            return f"the load exceeded the absolute cap of {format_duration_s(self.cap_s)}"
        if now < self.deadline_s:
            return None
        if self.phase == STAGING:
            return (
                f"staging made no progress for {format_duration_s(self.stall_s)} (stall window, "
                "CORRAL_LOAD_STALL_WINDOW): the worker stopped accepting data"
            )
        if self.phase == LOADING:
            return (
                f"LoadModel did not finish within {format_duration_s(self._load_budget_s + SLACK_S)} "
                "(load budget + 5m; raise LOCALAI_NATS_MODEL_LOAD_TIMEOUT)"
            )
        return (
            f"no result within the cold-load budget of {format_duration_s(self.base_s)} (max("
            "LOCALAI_NATS_BACKEND_INSTALL_TIMEOUT + LOCALAI_NATS_MODEL_LOAD_TIMEOUT + 5m, 25m))"
        )
