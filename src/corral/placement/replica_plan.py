"""The replica reconciler's decision for one rule, as a pure function over a snapshot (reference §5.8).

In order:
  1. keep the minimum: fewer than `min` loaded (spread: one per matching node) ⇒ load the missing
     ones, as far as free replica slots allow; no slot or no matching node ⇒ unsatisfiable;
  2. burst: every replica busy and below `max` (0 = no bound) ⇒ one more;
  3. otherwise shrink, never below the minimum and only replicas with nothing in flight: replicas
     on nodes the selector no longer matches, then any above `max`, then those idle for the
     scale-down window above max(min, 1) — highest replica index first, then least recently used.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from corral.placement.filters.selector import selector_matches
from corral.placement.rules import SchedulingRule
from corral.placement.snapshot import NodeSnapshot, ReplicaSnapshot

LOADED = "loaded"
IN_PROGRESS = ("staging", "loading")

ReplicaFn = Callable[[NodeSnapshot, ReplicaSnapshot], float]


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

    def summary(self) -> str:
        high = "∞" if self.high is None else str(self.high)
        return f"{self.current} loaded, {self.pending} loading (want {self.low}..{high})"


def matching_nodes(selector: dict[str, str], nodes: Sequence[NodeSnapshot]) -> list[NodeSnapshot]:
    return [n for n in nodes if selector_matches(selector, n.labels) is None]


def bounds(rule: SchedulingRule, matching: int) -> tuple[int, int | None]:
    if rule.spread_all:
        return matching, matching
    return rule.min_replicas, (rule.max_replicas or None)


def replica_floor(rule: SchedulingRule, nodes: Sequence[NodeSnapshot]) -> int:
    """Eviction never takes a governed model below this many loaded replicas."""
    return bounds(rule, len(matching_nodes(rule.node_selector, nodes)))[0]


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
) -> Plan:
    matching = matching_nodes(selector, nodes)
    matching_ids = {n.id for n in matching}
    low, high = bounds(rule, len(matching))
    loaded = [(n, r) for n in nodes for r in n.replicas if r.model == model and r.state == LOADED]
    placed = [(n, r) for n, r in loaded if n.id in matching_ids]
    pending = sum(1 for n in matching for r in n.replicas if r.model == model and r.state in IN_PROGRESS)
    base = Plan(low, high, len(placed), pending)
    capacity = free_slots(model, matching)
    need = low - len(placed) - pending
    if need > 0:
        if capacity == 0:
            return Plan(
                low,
                high,
                len(placed),
                pending,
                unsatisfiable=_unsatisfiable(model, need, selector, nodes, matching),
            )
        return Plan(low, high, len(placed), pending, load=min(need, capacity))
    below_high = high is None or len(placed) < high
    if placed and not pending and below_high and capacity and all(in_flight(n, r) > 0 for n, r in loaded):
        return Plan(low, high, len(placed), pending, load=1)
    if pending:
        return base
    return Plan(
        low,
        high,
        len(placed),
        pending,
        stop=_shrink(base, loaded, placed, matching_ids, in_flight, idle_s, idle_window_s),
    )


def _shrink(
    plan: Plan,
    loaded: list[tuple[NodeSnapshot, ReplicaSnapshot]],
    placed: list[tuple[NodeSnapshot, ReplicaSnapshot]],
    matching_ids: set[str],
    in_flight: ReplicaFn,
    idle_s: ReplicaFn,
    idle_window_s: float,
) -> tuple[ReplicaRef, ...]:
    stops: list[ReplicaRef] = []
    if plan.current >= plan.low:  # the replacements exist: move off nodes the selector no longer matches
        stops += [
            ReplicaRef(n, r, "misplaced")
            for n, r in loaded
            if n.id not in matching_ids and in_flight(n, r) == 0
        ]
    idle_first = sorted(
        (p for p in placed if in_flight(*p) == 0), key=lambda p: (-p[1].replica_index, -idle_s(*p))
    )
    keep = plan.current
    if plan.high is not None:
        while keep > plan.high and idle_first:
            n, r = idle_first.pop(0)
            stops.append(ReplicaRef(n, r, "above max_replicas"))
            keep -= 1
    floor = max(plan.low, 1)
    for n, r in idle_first:
        if keep <= floor:
            break
        if idle_s(n, r) >= idle_window_s:
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
