"""The installed backend a launcher needs, found the way a worker finds any backend (`gallery.registry`)."""

from __future__ import annotations

from pathlib import Path

from corral.gallery.registry import BackendRegistry
from corral.node.errors import WorkerError


class EngineMissing(WorkerError):
    """The engine a launcher needs is not installed here; the message names what to install."""


def installed_backend_dir(name: str, backends_path: str, system_path: str) -> Path | None:
    """The directory of installed backend `name` (run.sh + metadata.json), or None."""
    found = BackendRegistry(Path(backends_path), Path(system_path), builtin_path=None).find(name)
    return found.directory if found is not None else None
