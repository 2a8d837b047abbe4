"""Making room by eviction, as a pure decision over a snapshot: which replicas to stop, on which node.

Only nodes the model may use are considered (the decision's ranked nodes: approved, selector,
replica slot, disk), and on such a node as many least-recently-used replicas are chosen as the
model's VRAM need takes — never fewer (then the model still would not fit), never a replica on a
node it cannot use (the reference's own defect: it frees one anywhere, then loads anyway). A
rule-governed model is never taken below its floor. When no allowed node can be freed enough,
`room_shortfall` says why, node by node. A replica of unknown size (recorded before sizes were,
or of a model whose need cannot be estimated) proves nothing about the fit and is not chosen.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from corral.config.sizes import format_size
from corral.placement.request import PlacementRequest
from corral.placement.snapshot import NodeSnapshot, ReplicaSnapshot

LOADED = "loaded"

ReplicaTest = Callable[[NodeSnapshot, ReplicaSnapshot], bool]
ReplicaRecency = Callable[[NodeSnapshot, ReplicaSnapshot], float]


@dataclass(frozen=True)
class RoomPlan:
    node: NodeSnapshot
    victims: tuple[ReplicaSnapshot, ...]  # stop in this order (least recently used first)
    freed_bytes: int


def free_after(node: NodeSnapshot, freed_bytes: int) -> int:
    """The node's free VRAM once `freed_bytes` of replicas are gone (the budget still caps it)."""
    available = node.available_vram + freed_bytes
    if node.vram_budget_bytes > 0:
        available = min(available, node.vram_budget_bytes)
    return max(0, available - node.reserved_vram)


def _candidates(req: PlacementRequest, node: NodeSnapshot, recency: ReplicaRecency) -> list[ReplicaSnapshot]:
    found = [r for r in node.replicas if r.state == LOADED and r.model != req.model and r.vram_bytes > 0]
    return sorted(found, key=lambda r: recency(node, r))


def _plan_node(
    req: PlacementRequest,
    node: NodeSnapshot,
    loaded: Counter[str],
    floors: Mapping[str, int],
    usable: ReplicaTest,
    recency: ReplicaRecency,
) -> RoomPlan | None:
    if node.total_vram <= 0 or req.vram_bytes <= 0:
        return None  # nothing to measure the fit against
    left = Counter(loaded)
    victims: list[ReplicaSnapshot] = []
    freed = 0
    for replica in _candidates(req, node, recency):
        if free_after(node, freed) >= req.vram_bytes:
            break
        if left[replica.model] <= floors.get(replica.model, 0) or not usable(node, replica):
            continue
        left[replica.model] -= 1
        victims.append(replica)
        freed += replica.vram_bytes
    if free_after(node, freed) < req.vram_bytes:
        return None
    return RoomPlan(node, tuple(victims), freed)


def loaded_counts(nodes: Sequence[NodeSnapshot]) -> Counter[str]:
    return Counter(r.model for n in nodes for r in n.replicas if r.state == LOADED)


def plan_room(
    req: PlacementRequest,
    allowed: Sequence[NodeSnapshot],
    loaded: Counter[str],
    floors: Mapping[str, int],
    usable: ReplicaTest,
    recency: ReplicaRecency,
) -> RoomPlan | None:
    """The allowed node needing the fewest stops (then the staler victims, then rank); None if none fits."""
    best: tuple[tuple[int, float, int], RoomPlan] | None = None
    for rank, node in enumerate(allowed):
        plan = _plan_node(req, node, loaded, floors, usable, recency)
        if plan is None:
            continue
        staleness = max((recency(node, v) for v in plan.victims), default=0.0)
        key = (len(plan.victims), staleness, rank)
        if best is None or key < best[0]:
            best = (key, plan)
    return None if best is None else best[1]


def room_shortfall(
    req: PlacementRequest,
    allowed: Sequence[NodeSnapshot],
    loaded: Counter[str],
    floors: Mapping[str, int],
    rejected: Mapping[str, str],
) -> str:
    """Why no allowed node can be freed enough: each node's need, free VRAM and what eviction could add."""
    parts = []
    for node in allowed:
        evictable = [
            r
            for r in _candidates(req, node, lambda _n, r: r.last_used_s)
            if loaded[r.model] > floors.get(r.model, 0)
        ]
        could = sum(r.vram_bytes for r in evictable)
        parts.append(
            f"{node.name} has {format_size(node.free_vram)} free and {format_size(could)} in "
            f"{len(evictable)} evictable replica(s) (total {format_size(free_after(node, could))})"
        )
    text = (
        f"scheduling {req.model}: no node it may use can be freed enough by eviction: it needs "
        f"{format_size(req.vram_bytes)} of VRAM, but " + "; ".join(parts)
    )
    if rejected:
        reasons = Counter(rejected.values())
        text += "; not allowed: " + ", ".join(f"{n} {reason}" for reason, n in reasons.most_common())
    return text
