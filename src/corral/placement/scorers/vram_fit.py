"""Prefer nodes with enough free VRAM for the model (free = min(detected, budget) − reservations)."""

from __future__ import annotations

from corral.placement.request import PlacementRequest
from corral.placement.snapshot import NodeSnapshot


class VramFitScorer:
    name = "vram_fit"

    def score(self, req: PlacementRequest, node: NodeSnapshot) -> float:
        if req.vram_bytes <= 0 or node.total_vram <= 0:
            return 50.0  # unknown need or no GPU facts: neutral, the next scorers decide
        if node.free_vram < req.vram_bytes:
            return 0.0
        headroom = (node.free_vram - req.vram_bytes) / max(node.free_vram, 1)
        return 60.0 + 40.0 * headroom  # fits: more headroom is better
