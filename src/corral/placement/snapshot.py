"""Immutable view of the cluster, built with one read per placement decision."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ReplicaSnapshot:
    model: str
    replica_index: int
    state: str
    address: str = ""
    in_flight: int = 0
    last_used_s: float = 0.0
    vram_bytes: int = 0  # the estimate it was placed with; 0 = unknown


@dataclass(frozen=True)
class NodeSnapshot:
    id: str
    name: str
    address: str
    http_address: str
    total_vram: int = 0
    available_vram: int = 0
    reserved_vram: int = 0
    vram_budget_bytes: int = 0
    total_disk: int = 0
    available_disk: int = 0
    max_replicas_per_model: int = 1
    labels: dict[str, str] = field(default_factory=dict, hash=False)
    replicas: tuple[ReplicaSnapshot, ...] = ()

    @property
    def loaded_models(self) -> int:
        return sum(1 for r in self.replicas if r.state == "loaded")

    @property
    def in_flight(self) -> int:
        return sum(r.in_flight for r in self.replicas if r.state == "loaded")

    @property
    def model_names(self) -> frozenset[str]:
        return frozenset(r.model for r in self.replicas if r.state != "unloading")

    @property
    def free_vram(self) -> int:
        """min(detected, budget) minus soft reservations of loads in progress; 0 when unknown."""
        available = self.available_vram
        if self.vram_budget_bytes > 0:
            available = min(available, self.vram_budget_bytes)
        return max(0, available - self.reserved_vram)

    def replica_indexes(self, model: str) -> set[int]:
        return {r.replica_index for r in self.replicas if r.model == model and r.state != "unloading"}

    def free_replica_index(self, model: str) -> int | None:
        """Lowest replica index no row of `model` holds on this node, or None when its slots are full.

        Slots count live rows only, but an `unloading` row still owns its index (and its process key
        `model#index`) until its exact stop: a new replica never reuses the process being stopped.
        """
        if len(self.replica_indexes(model)) >= max(1, self.max_replicas_per_model):
            return None
        taken = {r.replica_index for r in self.replicas if r.model == model}
        return next(i for i in range(len(taken) + 1) if i not in taken)
