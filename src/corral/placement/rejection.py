"""Why a node was not chosen, and the one-sentence summary when none fits."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from corral.placement.errors import PlacementError


@dataclass(frozen=True)
class Rejection:
    filter: str
    reason: str  # short, countable: "not enough free disk"
    detail: str = ""  # the node-specific explanation
    fields: dict[str, Any] = field(default_factory=dict, hash=False)


class NoNodeFits(PlacementError):
    """No node passed the filters; the message counts the reasons and names the fix where one exists."""

    def __init__(self, message: str, rejections: dict[str, Rejection]) -> None:
        super().__init__(message)
        self.rejections = rejections


def summarize(model: str, total_nodes: int, rejections: dict[str, Rejection]) -> str:
    counts = Counter(r.reason for r in rejections.values())
    parts = ", ".join(f"{n} {reason}" for reason, n in counts.most_common())
    return f"scheduling {model}: 0/{total_nodes} nodes fit: {parts}"
