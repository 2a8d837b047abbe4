"""Replace a file at once: a reader (or a crash) sees the old content or the new, never half of it.

The content goes to a hidden sibling (`.<name>.<random>.tmp`, so a directory scan for `*.yaml` never
takes it for a file of its own) that is renamed over the target. Whatever fails — the write (disk
full), the rename (the target is a directory), a cancellation — the sibling is removed before the
error goes on: a failed write leaves the directory as it was.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

FILE_MODE = 0o644


def replace_file(path: Path, data: bytes, mode: int = FILE_MODE) -> None:
    """Write `data` to `path` atomically (encode text before calling: nothing is created when it fails)."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp_name, mode)
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
