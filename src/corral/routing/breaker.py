"""Circuit breakers: a replica whose calls keep failing is taken out of picking for a cooldown, then tried again.

One breaker per replica (`Replica.key`), per frontend: each frontend judges replicas by its own calls and
says so in the explain endpoint (`GET /api/nodes/scheduling/explain?model=…`, `routing.replicas[].breaker`).

    CLOSED ──N failures in a row within the window──▶ OPEN ──cooldown over──▶ HALF_OPEN
      ▲                                                 ▲                         │ one trial request
      └──────────────── the trial succeeded ────────────┼─────────────────────────┤
                                                        └── the trial failed: cooldown doubled, up to the cap

A failure is what blames the replica: a connection failure or UNAVAILABLE, a replica gone, a timeout whose
replica still answers Health, a backend error (INTERNAL, UNKNOWN, DATA_LOSS). A refused request
(INVALID_ARGUMENT, OUT_OF_RANGE) proves the replica alive and counts as a success. `ReplicaView.pick` skips open
replicas; when every replica of a model is open, the caller probes them (`channels.healthy`) and a replica that
answers becomes half-open at once, so the request is its trial; else the request gets `ReplicasUnavailable`
(503 with Retry-After). Only replicas that failed have an entry: with none, a pick pays one truth test.
"""

from __future__ import annotations

import contextvars
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from corral.config.parse import format_duration_s
from corral.routing.errors import ReplicasUnavailable
from corral.runtime.loops import backoff_s
from corral.telemetry.families import BREAKER_TRANSITIONS

if TYPE_CHECKING:
    from corral.routing.replica import Replica

log = logging.getLogger(__name__)

COOLDOWN_KNOB = "CORRAL_BREAKER_COOLDOWN"
FAILURES_KNOB = "CORRAL_BREAKER_FAILURES"
PROBE_INTERVAL_S = (
    1.0  # with every replica open, one health probe per replica this often, not one per request
)

# The replicas this request already failed on: a retry's pick avoids them while another replica can serve
# (set by routing/calls.py around the retry's checkout; a ContextVar, so concurrent requests never see it).
avoided: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "corral_avoided", default=frozenset()
)


class BreakerState(Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True)
class BreakerSettings:
    """Breakers and retries (config/breakers.py names the settings)."""

    failures: int = 3  # CORRAL_BREAKER_FAILURES
    window_s: float = 60.0  # CORRAL_BREAKER_WINDOW
    cooldown_s: float = 30.0  # CORRAL_BREAKER_COOLDOWN
    cooldown_max_s: float = 300.0  # CORRAL_BREAKER_COOLDOWN_MAX
    retries: int = 2  # CORRAL_BACKEND_RETRIES
    retry_backoff_s: float = 0.05  # CORRAL_BACKEND_RETRY_BACKOFF

    @classmethod
    def from_settings(cls, settings: Any) -> BreakerSettings:
        return cls(
            failures=settings.breaker_failures,
            window_s=settings.breaker_window_s,
            cooldown_s=settings.breaker_cooldown_s,
            cooldown_max_s=max(settings.breaker_cooldown_max_s, settings.breaker_cooldown_s),
            retries=settings.backend_retries,
            retry_backoff_s=settings.backend_retry_backoff_s,
        )


@dataclass
class Breaker:
    """One replica's breaker; exists only while its replica has failed calls or is not closed."""

    model: str
    node_name: str
    state: BreakerState = BreakerState.CLOSED
    failures: int = 0  # in a row, the first at `first_failure_s`
    first_failure_s: float = 0.0
    openings: int = 0  # times opened since it last closed: the cooldown doubles with each
    open_until_s: float = 0.0
    trial: bool = False  # half-open: the one trial request is in flight
    probed_s: float = -math.inf
    last_failure: str = ""


class Breakers:
    """Every replica's breaker on this frontend. `clock`: monotonic seconds (tests inject one)."""

    def __init__(
        self, settings: BreakerSettings | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.settings = settings or BreakerSettings()
        self._clock = clock
        self._by_key: dict[str, Breaker] = {}
        self._tripped: set[str] = set()  # keys not closed

    def tripped_among(self, replicas: Iterable[Replica]) -> bool:
        """Whether a breaker of one of `replicas` is not closed (the hot path's warm case needs none: a sick
        replica of one model leaves every other model's requests on it)."""
        tripped = self._tripped
        return bool(tripped) and any(r.key in tripped for r in replicas)

    @property
    def tripped(self) -> bool:
        """Some breaker is open or half-open (picks must look); False on a healthy fleet."""
        return bool(self._tripped)

    def state(self, key: str) -> BreakerState:
        breaker = self._by_key.get(key)
        if breaker is None:
            return BreakerState.CLOSED
        self._cool(key, breaker)
        return breaker.state

    def _cool(self, key: str, breaker: Breaker) -> None:
        if breaker.state is BreakerState.OPEN and self._clock() >= breaker.open_until_s:
            self._move(key, breaker, BreakerState.HALF_OPEN)

    def may_pick(self, key: str) -> bool:
        """Closed, or half-open with its trial not yet taken."""
        breaker = self._by_key.get(key)
        if breaker is None:
            return True
        self._cool(key, breaker)
        if breaker.state is BreakerState.HALF_OPEN:
            return not breaker.trial
        return breaker.state is BreakerState.CLOSED

    def picked(self, key: str) -> None:
        """A pick chose this replica: a half-open breaker's trial is now in flight."""
        breaker = self._by_key.get(key)
        if breaker is not None:
            self._cool(key, breaker)
            if breaker.state is BreakerState.HALF_OPEN:
                breaker.trial = True

    def succeeded(self, replica: Replica) -> None:
        """A call answered (or was refused for its own fault): the streak ends; a half-open breaker closes.
        A straggler that succeeds while the breaker is open does not shorten the cooldown."""
        breaker = self._by_key.get(replica.key)
        if breaker is None:
            return
        self._cool(replica.key, breaker)
        if breaker.state is BreakerState.OPEN:
            return
        del self._by_key[replica.key]
        if breaker.state is BreakerState.HALF_OPEN:
            self._move(replica.key, breaker, BreakerState.CLOSED)

    def failed(self, replica: Replica, reason: str) -> BreakerState:
        """A call failed for the replica's fault; returns the breaker's state after it (OPEN: it opened or was)."""
        now = self._clock()
        breaker = self._by_key.get(replica.key)
        if breaker is None:
            breaker = self._by_key[replica.key] = Breaker(replica.model, replica.node_name)
        self._cool(replica.key, breaker)
        breaker.last_failure = reason
        if breaker.state is BreakerState.CLOSED:
            if breaker.failures == 0 or now - breaker.first_failure_s > self.settings.window_s:
                breaker.failures, breaker.first_failure_s = 0, now
            breaker.failures += 1
            if breaker.failures >= self.settings.failures:
                self._open(replica.key, breaker, now)
        elif breaker.state is BreakerState.HALF_OPEN:
            self._open(replica.key, breaker, now)
        return breaker.state

    def abandoned(self, replica: Replica) -> None:
        """A call ended with no verdict (the client went away, the request was bad before it was sent): a trial it
        was holding is free again."""
        if not self._tripped:
            return
        breaker = self._by_key.get(replica.key)
        if breaker is not None and breaker.state is BreakerState.HALF_OPEN:
            breaker.trial = False

    def _open(self, key: str, breaker: Breaker, now: float) -> None:
        breaker.openings += 1
        cooldown_s = backoff_s(breaker.openings, self.settings.cooldown_s, self.settings.cooldown_max_s)
        breaker.open_until_s, breaker.trial, breaker.failures = now + cooldown_s, False, 0
        self._move(key, breaker, BreakerState.OPEN)
        log.warning(
            "circuit breaker of %s on %s opened for %s (%s): %s",
            breaker.model,
            breaker.node_name,
            format_duration_s(cooldown_s),
            COOLDOWN_KNOB,
            breaker.last_failure,
        )

    def _move(self, key: str, breaker: Breaker, to: BreakerState) -> None:
        breaker.state = to
        if to is BreakerState.CLOSED:
            self._tripped.discard(key)
            log.info(
                "circuit breaker of %s on %s closed: its trial request succeeded",
                breaker.model,
                breaker.node_name,
            )
        else:
            self._tripped.add(key)
        BREAKER_TRANSITIONS.labels(breaker.model, to.value).inc()

    def forget(self, key: str) -> None:
        """The replica left the view: a replica loaded later under the same key starts closed."""
        self._by_key.pop(key, None)
        self._tripped.discard(key)

    def probe_due(self, replicas: Sequence[Replica]) -> list[Replica]:
        """The open replicas not probed within PROBE_INTERVAL_S (marked probed now)."""
        now = self._clock()
        due = []
        for replica in replicas:
            breaker = self._by_key.get(replica.key)
            if (
                breaker is not None
                and breaker.state is BreakerState.OPEN
                and now - breaker.probed_s >= PROBE_INTERVAL_S
            ):
                breaker.probed_s = now
                due.append(replica)
        return due

    def probe_passed(self, replica: Replica) -> None:
        """An open replica answered Health: half-open now, its trial free (the probing request takes it)."""
        breaker = self._by_key.get(replica.key)
        if breaker is not None and breaker.state is BreakerState.OPEN:
            self._move(replica.key, breaker, BreakerState.HALF_OPEN)

    def unavailable(self, model: str, replicas: Sequence[Replica]) -> ReplicasUnavailable:
        """The error for a model whose every replica is out of picking."""
        now = self._clock()
        waits_s = [
            max(0.0, b.open_until_s - now)
            for b in (self._by_key.get(r.key) for r in replicas)
            if b is not None and b.state is BreakerState.OPEN
        ]
        retry_after_s = max(1, math.ceil(min(waits_s, default=1.0)))
        causes = "; ".join(
            f"{r.node_name}: {b.last_failure}" for r in replicas if (b := self._by_key.get(r.key)) is not None
        )
        return ReplicasUnavailable(
            f"model {model}: the circuit breaker of every replica ({len(replicas)}) is open on this frontend after "
            f"failed calls ({causes}); retry in {retry_after_s}s (a breaker stays open for {COOLDOWN_KNOB}, "
            f"{format_duration_s(self.settings.cooldown_s)}, doubling after a failed trial; "
            f"{FAILURES_KNOB}={self.settings.failures} failures in a row open it)",
            model=model,
            retry_after_s=retry_after_s,
        )

    def explain(self, key: str) -> dict[str, object]:
        """The breaker of one replica for the explain endpoint."""
        breaker = self._by_key.get(key)
        if breaker is None:
            return {"state": BreakerState.CLOSED.value, "failures": 0}
        self._cool(key, breaker)
        view: dict[str, object] = {
            "state": breaker.state.value,
            "failures": breaker.failures,
            "last_failure": breaker.last_failure,
        }
        if breaker.state is BreakerState.OPEN:
            view["retry_in_s"] = round(max(0.0, breaker.open_until_s - self._clock()), 3)
        if breaker.state is BreakerState.HALF_OPEN:
            view["trial_in_flight"] = breaker.trial
        return view
