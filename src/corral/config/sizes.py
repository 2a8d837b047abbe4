"""Byte sizes: parsing settings (``512MiB``, ``50GiB``, ``1.5GB``, ``0``, plain bytes) and formatting
sizes for messages in the specification's style (decimal units, one decimal: ``73.5 GB``, ``0 B``).
One parser and one formatter for the whole project."""

from __future__ import annotations

import re

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?i?b?)\s*$", re.IGNORECASE)
_DECIMAL = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15}
_BINARY = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def parse_size_bytes(raw: str) -> int:
    """Parse a byte size; ``KiB``/``MiB``/``GiB`` are powers of 1024, ``KB``/``MB``/``GB`` of 1000."""
    match = _SIZE_RE.match(raw)
    if match is None:
        raise ValueError(f"{raw!r} is not a size; use e.g. 512MiB, 50GiB or a number of bytes")
    number, unit = float(match.group(1)), match.group(2).lower().rstrip("b")
    table, prefix = (_BINARY, unit[:-1]) if unit.endswith("i") else (_DECIMAL, unit)
    if prefix not in table:
        raise ValueError(f"{raw!r} is not a size; use e.g. 512MiB, 50GiB or a number of bytes")
    return int(number * table[prefix])


GIB = 1 << 30
_DECIMAL_UNITS = ("kB", "MB", "GB", "TB", "PB")
_BINARY_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")


def format_size(num_bytes: int, *, binary: bool = False) -> str:
    """A size for a message, one decimal: decimal units by default (the specification's `73.5 GB`),
    powers of 1024 with `binary` (`70.0 GiB`, where a formula is per GiB); plain bytes below one unit."""
    step, units = (1024.0, _BINARY_UNITS) if binary else (1000.0, _DECIMAL_UNITS)
    if num_bytes < step:
        return f"{max(0, num_bytes)} B"
    value = float(num_bytes)
    for unit in units[:-1]:
        value /= step
        if value < step:
            return f"{value:.1f} {unit}"
    return f"{value / step:.1f} {units[-1]}"
