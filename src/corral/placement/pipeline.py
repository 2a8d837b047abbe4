"""The placement pipeline: filters, then scorers, over one snapshot; every decision explains itself.

Order (declared once, here):
  filters — selector first (the operator's explicit intent), then replica slots, then disk headroom
            (its rejection has the specification's exact message, so it must see every node that is
            otherwise eligible);
  scorers — compared lexicographically: enough free VRAM, then idle, then least loaded.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from corral.placement.errors import NoNodeAvailable
from corral.placement.filters.disk_headroom import DiskHeadroomFilter, disk_message, required_disk_bytes
from corral.placement.filters.replica_slots import ReplicaSlotFilter
from corral.placement.filters.selector import SelectorFilter
from corral.placement.rejection import NoNodeFits, Rejection, summarize
from corral.placement.request import PlacementRequest
from corral.placement.scorers.idle import IdleScorer
from corral.placement.scorers.least_loaded import LeastLoadedScorer
from corral.placement.scorers.vram_fit import VramFitScorer
from corral.placement.snapshot import NodeSnapshot

log = logging.getLogger(__name__)


class Filter(Protocol):
    name: str

    def check(self, req: PlacementRequest, node: NodeSnapshot) -> Rejection | None: ...


class Scorer(Protocol):
    name: str

    def score(self, req: PlacementRequest, node: NodeSnapshot) -> float: ...


FILTERS: tuple[Filter, ...] = (SelectorFilter(), ReplicaSlotFilter(), DiskHeadroomFilter())
SCORERS: tuple[Scorer, ...] = (VramFitScorer(), IdleScorer(), LeastLoadedScorer())


@dataclass
class Decision:
    request: PlacementRequest
    ranked: Sequence[NodeSnapshot]  # best first (an indexed decision ranks lazily: placement/index.py)
    scores: dict[str, dict[str, float]] = field(default_factory=dict)
    rejections: dict[str, Rejection] = field(default_factory=dict)
    needs_eviction: bool = False  # nothing has room: free a node by evicting an idle replica
    warnings: list[str] = field(default_factory=list)

    @property
    def node(self) -> NodeSnapshot:
        return self.ranked[0]

    def explain(self) -> dict[str, Any]:
        nodes = []
        for name, rejection in sorted(self.rejections.items()):
            nodes.append(
                {
                    "node": name,
                    "fits": False,
                    "filter": rejection.filter,
                    "reason": rejection.reason,
                    "detail": rejection.detail,
                }
            )
        for node in self.ranked:
            nodes.append({"node": node.name, "fits": True, "scores": self.scores[node.name]})
        return {
            "model": self.request.model,
            "chosen": self.ranked[0].name if self.ranked else None,
            "needs_eviction": self.needs_eviction,
            "warnings": self.warnings,
            "nodes": nodes,
        }


def _filter(req: PlacementRequest, nodes: Sequence[NodeSnapshot], decision: Decision) -> list[NodeSnapshot]:
    passed: list[NodeSnapshot] = []
    disk_only: list[NodeSnapshot] = []
    for node in nodes:
        rejection = next((r for f in FILTERS if (r := f.check(req, node)) is not None), None)
        if rejection is None:
            passed.append(node)
        else:
            decision.rejections[node.name] = rejection
            if rejection.filter == DiskHeadroomFilter.name:
                disk_only.append(node)
    if passed or not disk_only:
        return passed
    disk_rejections = [decision.rejections[n.name] for n in disk_only]
    message = disk_message(req.model, required_disk_bytes(req.disk_bytes), disk_rejections)
    if req.disk_check:  # every node that could otherwise take the model lacks disk: the spec's message
        raise NoNodeFits(message, decision.rejections)
    warning = (
        f"No node has room to store this model, but the disk-headroom check is DISABLED; scheduling "
        f"anyway — staging will most likely fail with ENOSPC model={req.model} "
        "knob=distributed-disk-headroom-check"
    )
    log.warning("%s (%s)", warning, message)
    decision.warnings.append(warning)
    for node in disk_only:
        del decision.rejections[node.name]
    return disk_only


def decide(req: PlacementRequest, nodes: Sequence[NodeSnapshot]) -> Decision:
    """Rank the nodes that can take `req`; raise when none can, with the reasons counted."""
    if not nodes:
        raise NoNodeAvailable(
            f"scheduling {req.model}: no healthy worker node is registered "
            "(start `corral worker --register-to <frontend>`, or approve pending nodes)"
        )
    decision = Decision(request=req, ranked=[])
    passed = _filter(req, nodes, decision)
    if not passed:
        raise NoNodeFits(summarize(req.model, len(nodes), decision.rejections), decision.rejections)
    for node in passed:
        decision.scores[node.name] = {s.name: round(s.score(req, node), 2) for s in SCORERS}
    order = [s.name for s in SCORERS]
    decision.ranked = sorted(
        passed, key=lambda n: (tuple(-decision.scores[n.name][k] for k in order), n.name)
    )
    best = decision.scores[decision.ranked[0].name]
    decision.needs_eviction = best[VramFitScorer.name] == 0.0 and best[IdleScorer.name] == 0.0
    return decision
