"""Per-node VRAM budget: `80%`, `12GB`, `12GiB`, `12000MB`, raw bytes, or a fraction `0.8`.

A budget can only lower what a node offers for placement, never raise it above the hardware:
ceiling = min(detected total, fraction × total or the absolute amount).
"""

from __future__ import annotations

import re

_UNITS = {"b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
_AMOUNT_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$", re.IGNORECASE)
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
    match = _AMOUNT_RE.match(text)
    if not match or match.group(2).lower() not in ("", *_UNITS):
        raise BadVramBudget(f"VRAM budget {raw!r} is not valid; use {ACCEPTED}")
    value, unit = float(match.group(1)), match.group(2).lower()
    if not unit and 0 < value <= 1 and "." in match.group(1):
        return value, None
    amount = value * _UNITS.get(unit or "b", 1)
    if amount > BYTES_MAX:  # backend_nodes.vram_budget_bytes is a bigint
        raise BadVramBudget(f"VRAM budget {raw!r} is too large; the most is {BYTES_MAX} bytes (8 EiB)")
    return None, int(amount)


def budget_bytes(raw: str, total_vram: int) -> int:
    """The placement ceiling in bytes; 0 means no budget."""
    fraction, amount = parse_budget(raw)
    if fraction is not None:
        return int(total_vram * fraction) if total_vram else 0
    if amount is not None:
        return min(total_vram, amount) if total_vram else amount
    return 0
