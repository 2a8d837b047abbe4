"""The router queue: a request that finds every slot of its model taken waits here instead of being refused.

A model has `slots × replicas` slots (counted cluster-wide: this frontend's requests plus the in-flight counts
the other frontends report over NATS). A replica's slots are `--replica-slots` when set, else its model's
`parallel` + 1 (`replica_slots`): the backend always holds the next request while it finishes one, and every
other request waits here, where priorities and fairness decide, not in the backend's own first-come line. A request takes a slot before it is routed and gives it
back when its call ends (`Router.checkout` / `Router.release`). With no replica yet, one replica's worth of
requests go through to the cold path (they wait for the load); the rest wait here until the load adds slots.

Waiting requests are served:
  1. by priority class (tenancy/caller.py: critical, high, normal, low, batch): a waiting request of a more urgent
     class always goes first, so the Batch API's work only fills slots nobody interactive wants;
  2. within a class, fairly between tenants by tokens served — the Virtual Token Counter (Sheng et al., "Fairness
     in Serving Large Language Models", OSDI 2024): each tenant has a counter of the tokens it was served on this
     model (prompt tokens × 1 + completion tokens × 2); the waiting tenant with the smallest counter goes next,
     and a tenant that starts waiting is lifted to the smallest counter among the tenants already waiting, so
     idling banks no credit. A dispatch charges the tenant its average request cost at once (its real counts
     replace the estimate when the call ends), so a tenant cannot get ahead by sending many requests at once;
  3. within a tenant, first come first served.

Bounded: at most `--queue-max-depth` requests wait per model (one more: `QueueFull`, 429), each at most
`--queue-timeout` (`QueueTimeout`, 429); both name the setting and carry a Retry-After. A request whose client
goes away leaves the queue at once (its task is cancelled).

The warm path keeps its cost when nothing waits: taking a slot is a dict lookup and two comparisons, no await.
VTC counters are per frontend: with N frontends each is fair among the requests it holds.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from corral.config.parse import format_duration_s
from corral.config.traffic import FrontendQueueSettings
from corral.telemetry.families import QUEUE_DEPTH, QUEUE_REFUSED, QUEUE_WAIT
from corral.tenancy.caller import PRIORITY_CLASSES, Caller
from corral.tenancy.usage import Counts

PROMPT_WEIGHT, COMPLETION_WEIGHT = 1.0, 2.0  # VTC's w_p, w_q: a generated token costs about two prompt tokens
TIMEOUT_KNOB, DEPTH_KNOB, SLOTS_KNOB = (
    "CORRAL_QUEUE_TIMEOUT",
    "CORRAL_QUEUE_MAX_DEPTH",
    "CORRAL_REPLICA_SLOTS",
)
RECENT = 256  # waits and first-token times kept per model for the percentiles the autoscaler reads


PARALLEL_OPTIONS = ("parallel", "n_parallel")  # a model's concurrent sequences, as the backends read them
PARALLEL_MAX = 256


def replica_slots(options: Iterable[str], configured: int = 0) -> int:
    """Requests one replica of a model with these `options` is sent at once: `configured` (CORRAL_REPLICA_SLOTS)
    when set, else the model's `parallel` (its option `parallel:N` or `n_parallel:N`; 1 without one) plus one."""
    if configured > 0:
        return configured
    for entry in options:
        key, _, value = entry.partition(":")
        value = value.strip()
        if key.strip() in PARALLEL_OPTIONS and value.isdigit() and int(value) > 0:
            return min(int(value), PARALLEL_MAX) + 1
    return 2


@dataclass(frozen=True)
class QueueSettings:
    slots: int = 0  # per replica; 0: each model's own (replica_slots)
    timeout_s: float = 60.0
    max_depth: int = 256

    @classmethod
    def from_settings(cls, settings: FrontendQueueSettings) -> QueueSettings:
        return cls(settings.replica_slots, settings.queue_timeout_s, settings.queue_max_depth)


class Queued(Exception):
    """A request the queue could not serve; the message names the setting, `retry_after_s` the wait to suggest."""

    code: ClassVar[str] = (
        "queue"  # ClassVar: compiled (corral/native.py), an exception's plain class attribute
    )
    # that a subclass sets again is not found on its instances

    def __init__(self, message: str, *, model: str, knob: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.model, self.knob, self.retry_after_s = model, knob, retry_after_s


class QueueFull(Queued):
    code: ClassVar[str] = "queue_full"


class QueueTimeout(Queued):
    code: ClassVar[str] = "queue_timeout"


@dataclass(eq=False)
class _Waiter:
    caller: Caller
    since_s: float
    future: asyncio.Future[None]


@dataclass(frozen=True)
class QueueStats:
    """One model's queue on this frontend, for metrics, placement and the autoscaler."""

    depth: int  # waiting now
    busy: int  # slots held by this frontend's requests
    oldest_wait_s: float  # how long the longest-waiting request has waited
    wait_p95_s: float  # over the recent dispatches (0 with none)
    ttft_p95_s: float  # recent first tokens of streams, from the call's start
    served: int  # dispatched from the queue since start
    refused: int  # QueueFull + QueueTimeout since start


def _p95(values: deque[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


@dataclass
class _Line:
    """One model's slots and waiters."""

    model: str
    busy: int = 0
    depth: int = 0
    waiting: list[dict[str, deque[_Waiter]]] = field(
        default_factory=lambda: [{} for _ in PRIORITY_CLASSES]
    )  # by class rank, then tenant (insertion order = first to wait)
    counters: dict[str, float] = field(default_factory=dict)  # tenant → virtual tokens served
    cost: dict[str, float] = field(default_factory=dict)  # tenant → average tokens per request (estimate)
    waits: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT))
    ttfts: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT))
    served: int = 0
    refused: int = 0
    last: float = (
        0.0  # the counter of the tenant served last: the floor of a tenant arriving to an empty queue
    )

    def backlogged(self) -> list[str]:
        return [t for tenants in self.waiting for t in tenants]


class ModelQueue:
    def __init__(
        self,
        settings: QueueSettings,
        capacity: Callable[[str], int],
        clock: Callable[[], float] = time.monotonic,
        slots_of: Callable[[str], int] | None = None,
    ) -> None:
        """`capacity(model)`: the slots this frontend may use for `model` now (its replicas' slots less the
        requests other frontends have in flight on them); `slots_of(model)`: one replica's slots, as messages
        say it."""
        self.settings, self._capacity, self._clock = settings, capacity, clock
        self._slots_of = slots_of or (lambda _model: settings.slots or replica_slots(()))
        self._lines: dict[str, _Line] = {}

    def _line(self, model: str) -> _Line:
        line = self._lines.get(model)
        if line is None:
            line = self._lines[model] = _Line(model)
        return line

    async def admit(self, model: str, caller: Caller) -> None:
        """Take one of `model`'s slots, waiting for one when all are taken; raises QueueFull, QueueTimeout."""
        if not self.try_admit(model, caller):
            await self._wait(self._line(model), caller)

    def try_admit(self, model: str, caller: Caller) -> bool:
        """Take one of `model`'s slots when one is free and nobody waits (the warm case: no await); else False,
        nothing taken."""
        line = self._line(model)
        if line.depth or line.busy >= self._capacity(model):
            return False
        line.busy += 1
        self._start(line, caller.tenant, line.last)  # nobody waits: no lower than the last one served
        return True

    async def _wait(self, line: _Line, caller: Caller) -> None:
        if line.depth >= self.settings.max_depth:
            line.refused += 1
            QUEUE_REFUSED.labels(line.model, "full").inc()
            raise QueueFull(
                f"model {line.model}: {line.depth} requests are already waiting for a free replica slot on this "
                f"frontend, its limit; retry later, raise {DEPTH_KNOB}, or add replicas (each takes "
                f"{self._slots_of(line.model)} requests at once, {SLOTS_KNOB})",
                model=line.model,
                knob=DEPTH_KNOB,
                retry_after_s=max(1, round(_p95(line.waits)) or 1),
            )
        tenants = line.waiting[caller.rank]
        waiting = line.backlogged()
        if caller.tenant not in waiting:
            self._lift(line, caller.tenant, waiting)
        waiter = _Waiter(caller, self._clock(), asyncio.get_running_loop().create_future())
        tenants.setdefault(caller.tenant, deque()).append(waiter)
        line.depth += 1
        QUEUE_DEPTH.labels(line.model).inc()
        self.dispatch(line.model)  # a slot may have freed without a dispatch (capacity grew)
        try:
            async with asyncio.timeout(self.settings.timeout_s):
                await waiter.future
        except BaseException as exc:
            if waiter.future.done() and not waiter.future.cancelled():
                self.release(line.model)  # dispatched as it gave up: the slot goes to the next one
            else:
                self._drop(line, waiter)
            if isinstance(exc, TimeoutError):
                line.refused += 1
                QUEUE_REFUSED.labels(line.model, "timeout").inc()
                raise QueueTimeout(
                    f"model {line.model}: no replica slot freed within "
                    f"{format_duration_s(self.settings.timeout_s)} in the queue (raise {TIMEOUT_KNOB}, or add "
                    f"replicas: each takes {self._slots_of(line.model)} requests at once, {SLOTS_KNOB})",
                    model=line.model,
                    knob=TIMEOUT_KNOB,
                    retry_after_s=max(1, round(self.settings.timeout_s / 4)),
                ) from None
            raise

    def _drop(self, line: _Line, waiter: _Waiter) -> None:
        tenants = line.waiting[waiter.caller.rank]
        mine = tenants.get(waiter.caller.tenant)
        if mine is not None and waiter in mine:
            mine.remove(waiter)
            line.depth -= 1
            QUEUE_DEPTH.labels(line.model).dec()
            if not mine:
                del tenants[waiter.caller.tenant]

    def _lift(self, line: _Line, tenant: str, waiting: list[str]) -> None:
        """VTC: a tenant that starts waiting starts at the smallest counter among those `waiting`, or with nobody
        waiting at the counter of the tenant served last: no credit is banked by idling, and no debt is kept from
        a time the model was one tenant's alone."""
        floor = min(line.counters.get(t, 0.0) for t in waiting) if waiting else line.last
        line.counters[tenant] = max(line.counters.get(tenant, 0.0), floor)

    def _start(self, line: _Line, tenant: str, floor: float) -> None:
        """`tenant` takes a slot: charged its average request cost at once (its real counts replace it when the
        call ends), from no lower than `floor`; it becomes the tenant served last."""
        line.last = line.counters[tenant] = max(line.counters.get(tenant, 0.0), floor) + line.cost.get(
            tenant, 1.0
        )

    def release(self, model: str) -> None:
        """A request gave its slot back (its call ended): the next waiting request gets it."""
        line = self._lines.get(model)
        if line is None:
            return
        line.busy -= 1
        if line.depth:
            self.dispatch(model)

    def dispatch(self, model: str) -> None:
        """Hand free slots to waiting requests: most urgent class first, then the tenant with the least served."""
        line = self._lines.get(model)
        if line is None:
            return
        while line.depth and line.busy < self._capacity(model):
            tenants = next(t for t in line.waiting if t)
            tenant = min(tenants, key=lambda t: line.counters.get(t, 0.0))  # ties: the first to wait
            mine = tenants[tenant]
            waiter = mine.popleft()
            if not mine:
                del tenants[tenant]
            line.depth -= 1
            QUEUE_DEPTH.labels(model).dec()
            if waiter.future.done():  # gave up in the same loop iteration: not counted, try the next
                continue
            line.busy += 1
            line.served += 1
            waited_s = self._clock() - waiter.since_s
            line.waits.append(waited_s)
            QUEUE_WAIT.labels(model, waiter.caller.priority).observe(waited_s)
            self._start(line, tenant, 0.0)  # lifted when it started waiting
            waiter.future.set_result(None)

    def poke(self) -> None:
        """Capacity may have grown (a replica was added): serve whoever waits."""
        for model, line in self._lines.items():
            if line.depth:
                self.dispatch(model)

    def charge(self, caller: Caller, model: str, counts: Counts) -> None:
        """The real tokens of a finished call replace the estimate charged when it took its slot."""
        line = self._lines.get(model)
        if line is None:
            return
        tenant = caller.tenant
        cost = PROMPT_WEIGHT * counts.prompt + COMPLETION_WEIGHT * counts.completion
        estimate = line.cost.get(tenant, 1.0)
        line.counters[tenant] = line.counters.get(tenant, 0.0) + cost - estimate
        line.cost[tenant] = 0.8 * estimate + 0.2 * cost if tenant in line.cost else cost

    def first_token(self, model: str, seconds: float) -> None:
        self._line(model).ttfts.append(seconds)

    def stats(self, model: str) -> QueueStats:
        line = self._lines.get(model)
        if line is None:
            return QueueStats(0, 0, 0.0, 0.0, 0.0, 0, 0)
        now = self._clock()
        oldest = min(
            (w.since_s for tenants in line.waiting for mine in tenants.values() for w in mine), default=now
        )
        return QueueStats(
            line.depth, line.busy, now - oldest, _p95(line.waits), _p95(line.ttfts), line.served, line.refused
        )

    def depth(self, model: str) -> int:
        """Requests waiting for the model on this frontend now."""
        line = self._lines.get(model)
        return 0 if line is None else line.depth

    def models(self) -> list[str]:
        return list(self._lines)
