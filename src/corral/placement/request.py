"""What one placement decision is asked to place."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PlacementRequest:
    model: str
    disk_bytes: int = 0  # model bytes on disk; 0 = unknown
    vram_bytes: int = 0  # estimated VRAM need; 0 = unknown
    selector: dict[str, str] = field(default_factory=dict, hash=False)
    disk_check: bool = True  # False: warn instead of rejecting (specification: "Turning the check off")
    shared_models: bool = False  # nothing is staged: the disk check does not apply
