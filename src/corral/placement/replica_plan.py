"""The replica reconciler's decision for one rule, as a pure function over a snapshot (reference §5.8).

In order:
  1. keep the minimum: fewer than `min` loaded (spread: one per matching node) ⇒ load the missing
     ones, as far as free replica slots allow; no slot or no matching node ⇒ unsatisfiable;
  2. burst: every replica busy and below `max` (0 = no bound) ⇒ one more — or, for a rule with load
     targets (issue 25), what `placement.autoscale` decides from the cluster's queue wait / TTFT;
  3. otherwise shrink, never below the minimum and only replicas with nothing in flight: replicas
     on nodes the selector no longer matches, then any above `max`, then those idle for the
     scale-down window above max(min, 1) — highest replica index first, then least recently used.
     With autoscaling, the minimum is raised by schedule windows, idle stops wait for the load to
     fall under its targets and for the cooldown, and the floor is 0 when the rule scales to zero.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from corral.placement.autoscale import Counts, Verdict, effective_min
from corral.placement.filters.selector import selector_matches
from corral.placement.rules import SchedulingRule
from corral.placement.snapshot import NodeSnapshot, ReplicaSnapshot

LOADED = "loaded"
IN_PROGRESS = ("staging", "loading")

ReplicaFn = Callable[[NodeSnapshot, ReplicaSnapshot], float]
Autoscaler = Callable[[Counts], Verdict]


@dataclass(frozen=True)
class ReplicaRef:
    node: NodeSnapshot
    replica: ReplicaSnapshot
    why: str  # "misplaced", "above max_replicas", "idle"


@dataclass(frozen=True)
class Plan:
    low: int  # replicas to keep
    high: int | None  # ceiling; None = no upper bound
    current: int  # loaded on matching nodes
    pending: int  # being loaded on matching nodes
    load: int = 0  # replicas to add now
    stop: tuple[ReplicaRef, ...] = ()
    unsatisfiable: str = ""  # why a needed replica has nowhere to go
    verdict: Verdict | None = None  # the autoscaler's decision and its reason (issue 25)

    def summary(self) -> str:
        high = "∞" if self.high is None else str(self.high)
        return f"{self.current} loaded, {self.pending} loading (want {self.low}..{high})"


def matching_nodes(selector: dict[str, str], nodes: Sequence[NodeSnapshot]) -> list[NodeSnapshot]:
    return [n for n in nodes if selector_matches(selector, n.labels) is None]


def bounds(rule: SchedulingRule, matching: int) -> tuple[int, int | None]:
    if rule.spread_all:
        return matching, matching
    return rule.min_replicas, (rule.max_replicas or None)


def replica_floor(rule: SchedulingRule, nodes: Sequence[NodeSnapshot], now_s: float | None = None) -> int:
    """Eviction never takes a governed model below this many loaded replicas (at `now_s`: schedules included)."""
    low, high = bounds(rule, len(matching_nodes(rule.node_selector, nodes)))
    if now_s is None or rule.spread_all:
        return low
    scheduled = effective_min(rule, now_s)[0]
    return max(low, scheduled if high is None else min(scheduled, high))


def free_slots(model: str, nodes: Sequence[NodeSnapshot]) -> int:
    return sum(max(0, max(1, n.max_replicas_per_model) - len(n.replica_indexes(model))) for n in nodes)


def _unsatisfiable(
    model: str,
    need: int,
    selector: dict[str, str],
    nodes: Sequence[NodeSnapshot],
    matching: Sequence[NodeSnapshot],
) -> str:
    wanted = f"{model} needs {need} more replica(s)"
    if not nodes:
        return f"{wanted} but no healthy worker node is registered"
    if not matching:
        return (
            f"{wanted} but node_selector {json.dumps(selector, sort_keys=True)} matches none of the "
            f"{len(nodes)} healthy node(s); label a node or change the rule"
        )
    return (
        f"{wanted} but every matching node ({len(matching)}) already runs its maximum replicas of it "
        "(max_replicas_per_model); add nodes or raise LOCALAI_MAX_REPLICAS_PER_MODEL"
    )


def plan_replicas(
    rule: SchedulingRule,
    model: str,
    selector: dict[str, str],
    nodes: Sequence[NodeSnapshot],
    *,
    in_flight: ReplicaFn,
    idle_s: ReplicaFn,
    idle_window_s: float,
    autoscaler: Autoscaler | None = None,
) -> Plan:
    """`autoscaler`: the rule's load decision (placement.autoscale.decide bound to the load and the clock)."""
    matching = matching_nodes(selector, nodes)
    matching_ids = {n.id for n in matching}
    low, high = bounds(rule, len(matching))
    loaded = [(n, r) for n in nodes for r in n.replicas if r.model == model and r.state == LOADED]
    placed = [(n, r) for n, r in loaded if n.id in matching_ids]
    pending = sum(1 for n in matching for r in n.replicas if r.model == model and r.state in IN_PROGRESS)
    capacity = free_slots(model, matching)
    verdict = None
    if autoscaler is not None and not rule.spread_all:
        verdict = autoscaler(Counts(len(placed), pending, capacity, high))
        low = max(low, verdict.low)
    base = Plan(low, high, len(placed), pending, verdict=verdict)
    need = low - len(placed) - pending
    if need > 0:
        if capacity == 0:
            return replace(base, unsatisfiable=_unsatisfiable(model, need, selector, nodes, matching))
        return replace(base, load=min(need, capacity))
    below_high = high is None or len(placed) < high
    room = bool(placed) and not pending and below_high and capacity > 0
    if verdict is None or verdict.busy_burst:
        bounded = (
            rule.min_replicas > 0 or rule.max_replicas > 0
        )  # a rule with only an idle window never bursts
        if room and bounded and all(in_flight(n, r) > 0 for n, r in loaded):
            return replace(base, load=1)
    elif room and verdict.add:
        return replace(base, load=1)
    if pending:
        return base
    floor, idle_ok = (verdict.floor, verdict.allow_idle_stop) if verdict else (max(low, 1), True)
    idle = _Idle(idle_s, idle_window_s if idle_ok else float("inf"), floor)
    return replace(base, stop=_shrink(base, loaded, placed, matching_ids, in_flight, idle))


@dataclass(frozen=True)
class _Idle:
    idle_s: ReplicaFn
    window_s: float  # inf: no idle stop this pass
    floor: int


def _shrink(
    plan: Plan,
    loaded: list[tuple[NodeSnapshot, ReplicaSnapshot]],
    placed: list[tuple[NodeSnapshot, ReplicaSnapshot]],
    matching_ids: set[str],
    in_flight: ReplicaFn,
    idle: _Idle,
) -> tuple[ReplicaRef, ...]:
    stops: list[ReplicaRef] = []
    if plan.current >= plan.low:  # the replacements exist: move off nodes the selector no longer matches
        stops += [
            ReplicaRef(n, r, "misplaced")
            for n, r in loaded
            if n.id not in matching_ids and in_flight(n, r) == 0
        ]
    idle_first = sorted(
        (p for p in placed if in_flight(*p) == 0), key=lambda p: (-p[1].replica_index, -idle.idle_s(*p))
    )
    keep = plan.current
    if plan.high is not None:
        while keep > plan.high and idle_first:
            n, r = idle_first.pop(0)
            stops.append(ReplicaRef(n, r, "above max_replicas"))
            keep -= 1
    for n, r in idle_first:
        if keep <= idle.floor:
            break
        if idle.idle_s(n, r) >= idle.window_s:
            stops.append(ReplicaRef(n, r, "idle"))
            keep -= 1
    return tuple(stops)


def registry_fingerprint(nodes: Sequence[NodeSnapshot]) -> str:
    """Changes when a node joins, leaves, is approved, relabelled or re-budgeted (not on heartbeats)."""
    facts = sorted(
        (n.id, sorted(n.labels.items()), n.vram_budget_bytes, n.max_replicas_per_model, n.total_vram)
        for n in nodes
    )
    return hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:32]
