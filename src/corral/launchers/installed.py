"""Where an installed backend's files are: `<backends path>/<name>` first, then the system path (reference §1.3)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from corral.worker.errors import WorkerError


class EngineMissing(WorkerError):
    """The engine a launcher needs is not installed here; the message names what to install."""


def installed_backend_dir(name: str, search: Sequence[Path]) -> Path | None:
    """The directory of backend `name` holding `run.sh` (`<path>/<name>` or `<path>/<name>/<name>`), or None."""
    for root in search:
        for candidate in (root / name, root / name / name):
            if (candidate / "run.sh").is_file():
                return candidate
    return None
