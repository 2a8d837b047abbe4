"""Plain-text tables: a header row, columns padded to their widest cell, no borders."""

from __future__ import annotations

from collections.abc import Sequence

from corral.config.sizes import format_size


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers], *[["" if c is None else str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in cells
    ]
    return "\n".join(lines)


def size(value: object) -> str:
    """Bytes as a readable size; '-' for nothing known."""
    try:
        number = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return "-"
    return format_size(number) if number > 0 else "-"


def labels(value: object) -> str:
    if not isinstance(value, dict) or not value:
        return "-"
    return ",".join(f"{k}={v}" for k, v in sorted(value.items()))
