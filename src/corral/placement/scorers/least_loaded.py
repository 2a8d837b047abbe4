"""Among the rest, prefer the node with the fewest requests in flight, then the fewest models."""

from __future__ import annotations

from corral.placement.request import PlacementRequest
from corral.placement.snapshot import NodeSnapshot


class LeastLoadedScorer:
    name = "least_loaded"

    def score(self, req: PlacementRequest, node: NodeSnapshot) -> float:
        return 100.0 / (1.0 + node.in_flight + 0.1 * node.loaded_models)
