"""Installed-or-install, per backend name, on one worker: the async face of the registry and installer.

Installs, upgrades and deletes of one backend hold its gate alone (`lock(name)`); process starts
share it (`shared(name)`), so none starts from a directory being replaced. Concurrent installs of
the same backend share one install and all get its result (each caller's progress listener sees it).
Blocking work (directory scans, downloads, pip) runs in threads.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path

from corral.gallery.gate import BackendGate
from corral.gallery.index import GalleryEntry, GalleryRef, find_entry, parse_galleries
from corral.gallery.installer import BackendInstaller, InstallError
from corral.gallery.registry import BackendRegistry, InstalledBackend
from corral.models.names import validate_backend_name

log = logging.getLogger(__name__)

ProgressListener = Callable[[str, str, int, int, bool], None]


@dataclass
class _SharedInstall:
    task: asyncio.Task[InstalledBackend]
    listeners: list[ProgressListener] = field(default_factory=list)


class BackendManager:
    def __init__(
        self,
        registry: BackendRegistry,
        installer: BackendInstaller,
        galleries: list[GalleryRef],
        *,
        timeout_s: float,
    ) -> None:
        self.registry = registry
        self.installer = installer
        self.galleries = galleries
        self.timeout_s = timeout_s
        self._gates: dict[str, BackendGate] = collections.defaultdict(BackendGate)
        self._installs: dict[str, _SharedInstall] = {}

    def lock(self, name: str) -> AbstractAsyncContextManager[None]:
        """Hold backend `name` alone (install, upgrade, delete)."""
        return self._gates[name].exclusive()

    def shared(self, name: str) -> AbstractAsyncContextManager[None]:
        """Use backend `name` alongside others (start a process from its directory)."""
        return self._gates[name].shared()

    def galleries_for(self, override: str | None) -> list[GalleryRef]:
        """A request's `backend_galleries` (JSON string) replaces the worker's galleries when given."""
        if override:
            return parse_galleries(override, "backend_galleries")
        return self.galleries

    async def find(self, name: str) -> InstalledBackend | None:
        return await asyncio.to_thread(self.registry.find, name)

    async def installed(self) -> list[InstalledBackend]:
        return await asyncio.to_thread(self.registry.installed)

    async def ensure(
        self,
        name: str,
        galleries: list[GalleryRef] | None = None,
        progress: ProgressListener | None = None,
        direct: tuple[GalleryEntry, GalleryRef] | None = None,
    ) -> InstalledBackend:
        """The installed backend `name` (or alias), installing it from the galleries first when missing
        (or from `direct`: an entry a request gave, the reference's external install by `uri`).

        Concurrent calls for one backend, by name or alias, share one install (keyed by the entry's name).
        """
        validate_backend_name(name)
        found = await self.find(name)
        if found is not None:
            return found
        refs = self.galleries if galleries is None else galleries
        if direct is None:
            direct = await asyncio.to_thread(find_entry, name, refs, self.timeout_s)
        entry, ref = direct
        shared = self._installs.get(entry.name)
        if shared is None:
            shared = _SharedInstall(
                asyncio.create_task(self._install_once(entry, ref), name=f"install:{entry.name}")
            )
            self._installs[entry.name] = shared
            shared.task.add_done_callback(lambda _t: self._installs.pop(entry.name, None))
        if progress is not None:
            shared.listeners.append(progress)
        return await asyncio.shield(shared.task)

    async def reinstall(
        self, name: str, galleries: list[GalleryRef] | None = None, progress: ProgressListener | None = None
    ) -> InstalledBackend:
        """Install `name` again from its gallery (upgrade); the caller holds `lock()` of its canonical name
        and stopped its processes."""
        validate_backend_name(name)
        refs = self.galleries if galleries is None else galleries
        entry, ref = await asyncio.to_thread(find_entry, name, refs, self.timeout_s)
        return await self._install(entry, ref, [progress] if progress is not None else [])

    async def canonical(self, name: str) -> str:
        """The directory name of an installed backend called `name` (name or alias); else `name` itself."""
        found = await self.find(name)
        return found.name if found is not None else name

    async def _install_once(self, entry: GalleryEntry, ref: GalleryRef) -> InstalledBackend:
        async with self.lock(entry.name):
            if (found := await self.find(entry.name)) is not None:
                return found  # installed while this caller waited for the lock
            shared = self._installs.get(entry.name)
            return await self._install(entry, ref, shared.listeners if shared else [])

    async def _install(
        self, entry: GalleryEntry, ref: GalleryRef, listeners: list[ProgressListener]
    ) -> InstalledBackend:
        def fan_out(phase: str, file_name: str, current: int, total: int, is_bytes: bool) -> None:
            for listener in list(listeners):
                listener(phase, file_name, current, total, is_bytes)

        def blocking() -> InstalledBackend:
            self.installer.install(entry, ref, fan_out)
            installed = self.registry.find(entry.name)
            if installed is None:
                raise InstallError(
                    f"backend {entry.name!r} was installed but is not found under "
                    f"{self.registry.backends_path}"
                )
            return installed

        log.info("installing backend %s from gallery %s (%s)", entry.name, ref.name, ref.url)
        installed = await asyncio.to_thread(blocking)
        log.info("backend %s installed in %s", entry.name, installed.directory)
        return installed

    async def remove(self, name: str) -> bool:
        """Delete the user-installed backend `name` (the caller holds `lock(name)`); system backends stay."""
        installed = await self.find(name)
        if installed is None or installed.is_system:
            return False
        return await asyncio.to_thread(self.installer.remove, installed.name)

    def clean_leftovers(self) -> list[str]:
        return self.installer.clean_leftovers()


def backends_root(path: str) -> Path:
    return Path(path).expanduser().resolve()
