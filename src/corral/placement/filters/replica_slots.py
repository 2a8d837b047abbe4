"""A node runs at most `max_replicas_per_model` replicas of one model (lowest free index is used)."""

from __future__ import annotations

from corral.placement.rejection import Rejection
from corral.placement.request import PlacementRequest
from corral.placement.snapshot import NodeSnapshot

NO_FREE_SLOT = "no free replica slot"


class ReplicaSlotFilter:
    name = "replica_slots"

    def check(self, req: PlacementRequest, node: NodeSnapshot) -> Rejection | None:
        if node.free_replica_index(req.model) is not None:
            return None
        return Rejection(
            self.name,
            NO_FREE_SLOT,
            f"{node.name} already runs {node.max_replicas_per_model} replica(s) of {req.model}",
        )
