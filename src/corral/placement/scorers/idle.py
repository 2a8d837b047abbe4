"""Prefer idle nodes (no loaded models): spread models across the fleet before stacking them."""

from __future__ import annotations

from corral.placement.request import PlacementRequest
from corral.placement.snapshot import NodeSnapshot


class IdleScorer:
    name = "idle"

    def score(self, req: PlacementRequest, node: NodeSnapshot) -> float:
        return 100.0 if node.loaded_models == 0 else 0.0
