"""Byte sizes in the specification's message style: decimal units, one decimal (`73.5 GB`, `0 B`)."""

from __future__ import annotations

GIB = 1 << 30
_UNITS = ("kB", "MB", "GB", "TB", "PB")


def decimal_size(num_bytes: int) -> str:
    if num_bytes < 1000:
        return f"{max(0, num_bytes)} B"
    value = float(num_bytes)
    for unit in _UNITS:
        value /= 1000.0
        if value < 1000.0 or unit == _UNITS[-1]:
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")
