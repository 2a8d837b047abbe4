"""Who may knock how often (issue 21): the registration rate per source, the pending-node cap, and the
failed-key throttle, built once from the frontend's settings and shared by its routes.

Registrations are rate limited per source address with a token bucket (`per_minute`, bursts of as
many), counted before the registration token is checked, so guessing the token on `/api/node/register`
is bounded too. New names are refused past `max_pending_nodes` nodes awaiting approval (store/nodes.py
counts them in the registering transaction). Both answer 429 naming their setting.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from corral.frontend.auth_throttle import AuthThrottle
from corral.frontend.sources import MAX_SOURCES, SourceTable

RATE_KNOB = "CORRAL_NODE_REGISTER_RATE"
PENDING_KNOB = "CORRAL_MAX_PENDING_NODES"


@dataclass
class _Bucket:
    tokens: float
    at_s: float


class RegisterRate:
    """Token bucket per source: `per_minute` registrations a minute, a burst of as many."""

    def __init__(
        self, per_minute: int, clock: Callable[[], float] = time.monotonic, max_sources: int = MAX_SOURCES
    ) -> None:
        self.per_minute, self._clock = per_minute, clock
        self._refill_per_s = per_minute / 60.0
        self._buckets: SourceTable[_Bucket] = SourceTable(max_sources)

    def take(self, source: str) -> float:
        """Spend one registration of `source`: 0 when allowed, else the seconds until one is."""
        now_s = self._clock()
        bucket = self._buckets.setdefault(source, lambda: _Bucket(float(self.per_minute), now_s))
        bucket.tokens = min(
            float(self.per_minute), bucket.tokens + (now_s - bucket.at_s) * self._refill_per_s
        )
        bucket.at_s = now_s
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / self._refill_per_s

    def refusal(self, retry_after_s: float) -> tuple[str, int]:
        seconds = max(1, math.ceil(retry_after_s))
        return (
            f"too many registrations from this address: at most {self.per_minute} a minute ({RATE_KNOB}); "
            f"retry after {seconds}s",
            seconds,
        )


def pending_cap_message(cap: int) -> str:
    return (
        f"{cap} nodes are already waiting for approval ({PENDING_KNOB}): approve them (POST "
        f"/api/nodes/<id>/approve) or delete them (DELETE /api/nodes/<id>), or raise {PENDING_KNOB}; "
        f"never-approved nodes that stop registering expire after CORRAL_PENDING_NODE_EXPIRY"
    )


@dataclass
class Admission:
    throttle: AuthThrottle = field(default_factory=lambda: AuthThrottle(20, 60.0))
    register_rate: RegisterRate = field(default_factory=lambda: RegisterRate(60))
    max_pending_nodes: int = 100

    @classmethod
    def from_settings(cls, settings: Any) -> Admission:
        return cls(
            AuthThrottle(settings.auth_failure_limit, settings.auth_failure_window_s),
            RegisterRate(settings.node_register_rate),
            settings.max_pending_nodes,
        )
