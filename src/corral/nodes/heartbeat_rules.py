"""When a heartbeat must reach PostgreSQL at once, and when it may be held in memory (pure).

A beat that only refreshes the timestamp is held until the checkpoint interval has passed
since the node's last durable write. Every figure is compared with the value last *written*,
not with the previous beat, so a reading that drifts in small steps still writes once the
total distance crosses the threshold.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

FREE_MOVE_THRESHOLD_BYTES = 256 << 20
ACTIVE_STATUSES = frozenset({"healthy", "draining"})  # beats of any other status write at once


@dataclass(frozen=True)
class Beat:
    """The figures one heartbeat carries; None = not reported (the stored value stays)."""

    available_vram: int | None = None
    available_ram: int | None = None
    available_disk: int | None = None
    total_vram: int | None = None
    total_disk: int | None = None
    gpu_vendor: str | None = None


HARDWARE_FACTS = ("gpu_vendor", "total_vram", "total_disk")
FREE_FIGURES = ("available_vram", "available_ram", "available_disk")


@dataclass(frozen=True)
class Written:
    """What this frontend last wrote for a node: when, the status it read back, the figures."""

    at_s: float
    status: str
    figures: Beat


def merge(old: Beat | None, beat: Beat) -> Beat:
    """The figures stored after writing `beat` on top of `old` (unreported fields keep their value)."""
    if old is None:
        return beat
    changes = {f.name: getattr(beat, f.name) for f in fields(Beat) if getattr(beat, f.name) is not None}
    return replace(old, **changes)


def write_reason(written: Written | None, beat: Beat, now_s: float, checkpoint_s: float) -> str | None:
    """Why this beat must be written now, or None to hold it in memory."""
    if written is None:
        return "first beat seen by this frontend"
    if written.status not in ACTIVE_STATUSES:
        return f"node is {written.status}"
    for name in HARDWARE_FACTS:
        value = getattr(beat, name)
        if value is not None and value != getattr(written.figures, name):
            return f"{name} changed"
    for name in FREE_FIGURES:
        value, last = getattr(beat, name), getattr(written.figures, name)
        if value is not None and (last is None or abs(value - last) > FREE_MOVE_THRESHOLD_BYTES):
            return f"{name} moved more than 256 MiB"
    if now_s - written.at_s >= checkpoint_s:
        return "checkpoint interval elapsed"
    return None
