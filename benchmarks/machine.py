"""What every benchmark does to the machine before measuring (imported by the benchmarks beside it)."""

from __future__ import annotations

import os
from pathlib import Path

TOUCH_MIB = 2048


def touch_memory(directory: Path, size_mib: int = TOUCH_MIB) -> None:
    """Write and delete `size_mib` once. On a virtual machine, memory the guest never used costs a host fault
    per page at its first touch (seen here: a first 1 GiB write at 0.4 GB/s, the next one at 4 GB/s). Without
    this, whichever figure writes first pays it, and the rounds compare machines, not code."""
    scratch = directory / f"touch-{os.getpid()}"
    block = b"\0" * (1 << 20)
    try:
        with open(scratch, "wb") as out:
            for _ in range(size_mib):
                out.write(block)
    finally:
        scratch.unlink(missing_ok=True)
