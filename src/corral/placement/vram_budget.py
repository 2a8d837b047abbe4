"""Per-node VRAM budget: `80%`, `12GB`, `12GiB`, `12000MB`, raw bytes, or a fraction `0.8`.

A budget can only lower what a node offers for placement, never raise it above the hardware:
ceiling = min(detected total, fraction × total or the absolute amount).
"""

from __future__ import annotations

from corral.config.sizes import parse_size_bytes

BYTES_MAX = (1 << 63) - 1
ACCEPTED = "a percentage (80%), an amount (12GB, 12GiB, 12000MB, raw bytes) or a fraction (0.8)"


class BadVramBudget(ValueError):
    """The budget does not parse; the message quotes it and lists the accepted forms."""


def parse_budget(raw: str) -> tuple[float | None, int | None]:
    """(fraction, None) or (None, bytes); (None, None) for an empty value (no budget)."""
    text = raw.strip()
    if not text:
        return None, None
    if text.endswith("%"):
        try:
            pct = float(text[:-1])
        except ValueError:
            raise BadVramBudget(f"VRAM budget {raw!r} is not valid; use {ACCEPTED}") from None
        if not 0 <= pct <= 100:
            raise BadVramBudget(f"VRAM budget {raw!r} must be between 0% and 100%")
        return (None, None) if pct == 0 else (pct / 100.0, None)
    try:
        fraction = float(text)
    except ValueError:
        fraction = None
    if fraction is not None and 0 < fraction <= 1 and "." in text:
        return fraction, None
    try:
        amount = parse_size_bytes(text)
    except ValueError:
        raise BadVramBudget(f"VRAM budget {raw!r} is not valid; use {ACCEPTED}") from None
    if amount > BYTES_MAX:  # backend_nodes.vram_budget_bytes is a bigint
        raise BadVramBudget(f"VRAM budget {raw!r} is too large; the most is {BYTES_MAX} bytes (8 EiB)")
    return None, amount


def budget_bytes(raw: str, total_vram: int) -> int:
    """The placement ceiling in bytes; 0 means no budget."""
    fraction, amount = parse_budget(raw)
    if fraction is not None:
        return int(total_vram * fraction) if total_vram else 0
    if amount is not None:
        return min(total_vram, amount) if total_vram else amount
    return 0
