"""Model sizing against the cluster ("will this model run here"), as pure functions over node facts.

The budget is the largest single healthy backend node, not the sum of the fleet (a model loads
into one node). A node's VRAM budget caps what it offers (placement refuses more anyway), and a
GPU node wins over a CPU node with more system RAM. Backend compatibility is judged against the
union of the capabilities present in the cluster: a CUDA-only build is offered when any worker
can run it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from corral.config.sizes import format_size
from corral.placement.filters.selector import selector_matches

CPU_CAPABILITIES = frozenset({"", "cpu", "default"})  # every node runs a CPU build


@dataclass(frozen=True)
class NodeMemory:
    id: str
    name: str
    total_vram: int = 0
    vram_budget_bytes: int = 0
    total_ram: int = 0
    gpu_vendor: str = ""
    capability: str = ""
    labels: dict[str, str] = field(default_factory=dict, hash=False)

    @property
    def is_gpu(self) -> bool:
        return self.total_vram > 0

    @property
    def memory_bytes(self) -> int:
        """What a model can use on this node: VRAM capped by its budget, or RAM on a CPU node."""
        if not self.is_gpu:
            return self.total_ram
        return min(self.total_vram, self.vram_budget_bytes) if self.vram_budget_bytes > 0 else self.total_vram


@dataclass(frozen=True)
class ClusterBudget:
    node_id: str
    node_name: str
    total_memory: int
    is_gpu: bool
    node_count: int

    def as_json(self) -> dict[str, Any]:
        return {
            "enabled": True,
            "node_id": self.node_id,
            "node_name": self.node_name,
            "total_memory": self.total_memory,
            "is_gpu": self.is_gpu,
            "node_count": self.node_count,
        }


def cluster_budget(
    nodes: Sequence[NodeMemory], selector: dict[str, str] | None = None
) -> ClusterBudget | None:
    """The node a model is sized against (among those matching `selector`); None when there is none."""
    eligible = [n for n in nodes if not selector or selector_matches(selector, n.labels) is None]
    if not eligible:
        return None
    best = min(eligible, key=lambda n: (not n.is_gpu, -n.memory_bytes, n.name))
    return ClusterBudget(best.id, best.name, best.memory_bytes, best.is_gpu, len(nodes))


def verdict(need_bytes: int, budget: ClusterBudget | None, local_bytes: int) -> dict[str, Any]:
    """Whether a model of `need_bytes` fits, and where ("Fits on dgx-01"); local host when no cluster."""
    where, room = (budget.node_name, budget.total_memory) if budget else ("this host", local_bytes)
    if need_bytes <= 0:
        return {"fits": None, "fits_on": None, "verdict": "size unknown"}
    if need_bytes <= room:
        return {"fits": True, "fits_on": where, "verdict": f"Fits on {where}"}
    return {
        "fits": False,
        "fits_on": None,
        "verdict": f"Too large: needs {format_size(need_bytes)}, the largest node ({where}) offers "
        f"{format_size(room)}",
    }


def capabilities(nodes: Iterable[NodeMemory]) -> set[str]:
    """Union of what the nodes can run: CPU builds everywhere, plus each GPU vendor and worker capability."""
    found = {"cpu"}
    for node in nodes:
        found.update(c for c in (node.gpu_vendor, node.capability) if c)
    return found


def compatible(requirement: str, present: set[str]) -> bool:
    """A build needing `requirement` (e.g. `nvidia`, `nvidia-cuda-12`) runs if any node offers it or a refinement."""
    if requirement in CPU_CAPABILITIES:
        return True
    return any(c == requirement or c.startswith(requirement + "-") for c in present)
