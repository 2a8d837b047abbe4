"""Installed backends: where a backend name resolves to a directory holding `run.sh` + `metadata.json`.

Lookup order is the reference's (§1.3): `<backends path>/<b>`, `<backends path>/<b>/<b>`, the same
under the system path, then corral's built-in backends (`llama-cpp`, `simulator`, shipped as
package data in `corral/gallery/system/`). A directory counts as installed only when it has both
files: the installer writes `metadata.json` last, so a half-installed backend is never found.
An installed backend's `alias` (from its metadata) resolves to it too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from corral.gallery.metadata import METADATA_FILE, RUN_FILE, BackendMetadata, read_metadata
from corral.models.names import backend_name_problem

BUILTIN_BACKENDS_DIR = Path(str(resources.files("corral.gallery").joinpath("system")))  # package data
INSTALL_PREFIX = ".install-"  # staging directories beside the target; never a valid backend name
TRASH_PREFIX = ".trash-"  # a replaced or deleted backend, renamed aside before removal


@dataclass(frozen=True)
class InstalledBackend:
    name: str  # the directory name (the gallery name)
    directory: Path
    metadata: BackendMetadata
    is_system: bool

    @property
    def run_file(self) -> Path:
        return self.directory / RUN_FILE

    def identity(self) -> tuple[int, int]:
        """(device, inode) of the directory: changes when an upgrade renames a new install into place."""
        st = os.stat(self.directory)
        return st.st_dev, st.st_ino

    def answers_to(self, name: str) -> bool:
        return name in (self.name, self.metadata.name, self.metadata.alias)


def _complete(directory: Path) -> bool:
    return (directory / RUN_FILE).is_file() and (directory / METADATA_FILE).is_file()


def _load(directory: Path, is_system: bool) -> InstalledBackend | None:
    if not _complete(directory):
        return None
    meta = read_metadata(directory)
    if meta is None:
        return None
    return InstalledBackend(directory.name, directory, meta, is_system)


class BackendRegistry:
    """Reads the backend directories on every call: an install or delete is visible at once."""

    def __init__(
        self,
        backends_path: Path,
        system_path: Path | None = None,
        builtin_path: Path | None = BUILTIN_BACKENDS_DIR,
    ) -> None:
        self.backends_path = backends_path
        self.roots: list[tuple[Path, bool]] = [(backends_path, False)]
        if system_path is not None:
            self.roots.append((system_path, True))
        if builtin_path is not None:
            self.roots.append((builtin_path, True))

    def find(self, name: str) -> InstalledBackend | None:
        """The installed backend called `name` (directory name or alias), or None."""
        if backend_name_problem(name) is not None:
            return None
        for root, is_system in self.roots:
            for candidate in (root / name, root / name / name):
                found = _load(candidate, is_system)
                if found is not None:
                    return found
        for backend in self.installed():
            if backend.metadata.alias == name:
                return backend
        return None

    def installed(self) -> list[InstalledBackend]:
        """Every installed backend; a name in an earlier root hides the same name in a later one."""
        seen: dict[str, InstalledBackend] = {}
        for root, is_system in self.roots:
            try:
                entries = sorted(os.scandir(root), key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                if entry.name in seen or backend_name_problem(entry.name) is not None:
                    continue
                if not entry.is_dir():
                    continue
                found = _load(Path(entry.path), is_system)
                if found is not None:
                    seen[entry.name] = found
        return list(seen.values())
