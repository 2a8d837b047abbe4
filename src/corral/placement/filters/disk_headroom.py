"""Drop nodes whose models filesystem cannot hold the model (specification: "Disk headroom")."""

from __future__ import annotations

from corral.config.sizes import GIB, format_size
from corral.placement.rejection import Rejection
from corral.placement.request import PlacementRequest
from corral.placement.snapshot import NodeSnapshot

NOT_ENOUGH_DISK = "not enough free disk"
DISK_MARGIN_FRACTION = 0.05
DISK_MARGIN_MIN_BYTES = GIB
UNKNOWN_SIZE_FLOOR_BYTES = 2 * GIB


def required_disk_bytes(model_bytes: int) -> int:
    """Model bytes + max(5%, 1 GiB); a 2 GiB floor when the size is unknown."""
    if model_bytes <= 0:
        return UNKNOWN_SIZE_FLOOR_BYTES
    return model_bytes + max(int(model_bytes * DISK_MARGIN_FRACTION), DISK_MARGIN_MIN_BYTES)


class DiskHeadroomFilter:
    name = "disk_headroom"

    def check(self, req: PlacementRequest, node: NodeSnapshot) -> Rejection | None:
        if req.shared_models or node.total_disk == 0:  # nothing staged / disk unknown: stays in rotation
            return None
        need = required_disk_bytes(req.disk_bytes)
        if node.available_disk >= need:
            return None
        return Rejection(
            self.name,
            NOT_ENOUGH_DISK,
            f"{node.name} has {format_size(node.available_disk)} free of {format_size(node.total_disk)}",
            {"need": need, "free": node.available_disk, "total": node.total_disk},
        )


def disk_message(model: str, need: int, rejections: list[Rejection]) -> str:
    """The specification's exact capacity error, every rejected node listed."""
    nodes = ", ".join(r.detail for r in rejections)
    return (
        f"scheduling {model}: no node has enough free disk for the model: need {format_size(need)} free on "
        f"the models filesystem, but {nodes}"
    )
