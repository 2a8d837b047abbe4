"""Thin placement: a node that already has the model, else an idle node, else the least loaded.

Pure function over a snapshot. The full filter/score pipeline (disk headroom, VRAM fit,
selectors, eviction) replaces this module; callers depend only on `pick_node`.
"""

from __future__ import annotations

from collections.abc import Sequence

from corral.placement.errors import NoNodeAvailable
from corral.placement.snapshot import NodeSnapshot


def _least_loaded_key(node: NodeSnapshot) -> tuple[int, int, int, str]:
    return (node.in_flight, node.loaded_models, -node.available_vram, node.name)


def pick_node(nodes: Sequence[NodeSnapshot], model: str) -> NodeSnapshot:
    if not nodes:
        raise NoNodeAvailable(
            f"cannot place model {model!r}: no healthy worker node is registered "
            "(start `corral worker --register-to <frontend>`, or approve pending nodes)"
        )
    # Order matters: reuse a node that already holds the model's files/process before spreading out,
    # then spread across idle nodes (one model per node while there is room), then balance load.
    holding = [n for n in nodes if model in n.model_names]
    if holding:
        return min(holding, key=_least_loaded_key)
    idle = [n for n in nodes if n.loaded_models == 0]
    if idle:
        return min(idle, key=lambda n: (-n.available_vram, n.name))
    return min(nodes, key=_least_loaded_key)
