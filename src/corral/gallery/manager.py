"""Installed-or-install, per backend name, on one worker: the async face of the registry and installer.

Operations on one backend name are serialised (`lock(name)`); concurrent installs of the same
name share one install and all get its result (each caller's progress listener sees it).
Blocking work (directory scans, downloads, pip) runs in threads.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from corral.gallery.index import GalleryRef, find_entry, parse_galleries
from corral.gallery.installer import BackendInstaller, InstallError
from corral.gallery.names import validate_backend_name
from corral.gallery.registry import BackendRegistry, InstalledBackend

log = logging.getLogger(__name__)

ProgressListener = Callable[[str, str, int, int, bool], None]


@dataclass
class _SharedInstall:
    task: asyncio.Task[InstalledBackend]
    listeners: list[ProgressListener] = field(default_factory=list)


class BackendManager:
    def __init__(self, registry: BackendRegistry, installer: BackendInstaller, galleries: list[GalleryRef],
                 *, timeout_s: float) -> None:
        self.registry = registry
        self.installer = installer
        self.galleries = galleries
        self.timeout_s = timeout_s
        self._locks: dict[str, asyncio.Lock] = collections.defaultdict(asyncio.Lock)
        self._installs: dict[str, _SharedInstall] = {}

    def lock(self, name: str) -> asyncio.Lock:
        return self._locks[name]

    def galleries_for(self, override: str | None) -> list[GalleryRef]:
        """A request's `backend_galleries` (JSON string) replaces the worker's galleries when given."""
        if override:
            return parse_galleries(override, "backend_galleries")
        return self.galleries

    async def find(self, name: str) -> InstalledBackend | None:
        return await asyncio.to_thread(self.registry.find, name)

    async def list(self) -> list[InstalledBackend]:
        return await asyncio.to_thread(self.registry.list)

    async def ensure(self, name: str, galleries: list[GalleryRef] | None = None,
                     progress: ProgressListener | None = None) -> InstalledBackend:
        """The installed backend `name`, installing it from the galleries first when missing."""
        validate_backend_name(name)
        found = await self.find(name)
        if found is not None:
            return found
        shared = self._installs.get(name)
        if shared is None:
            shared = _SharedInstall(asyncio.create_task(self._install_locked(name, galleries, force=False),
                                                        name=f"install:{name}"))
            self._installs[name] = shared
            shared.task.add_done_callback(lambda _t: self._installs.pop(name, None))
        if progress is not None:
            shared.listeners.append(progress)
        return await asyncio.shield(shared.task)

    async def reinstall(self, name: str, galleries: list[GalleryRef] | None = None,
                        progress: ProgressListener | None = None) -> InstalledBackend:
        """Install `name` again from its gallery (upgrade); the caller holds `lock(name)` and stopped its processes."""
        validate_backend_name(name)
        listeners = [progress] if progress is not None else []
        return await self._install(name, galleries, listeners)

    async def _install_locked(self, name: str, galleries: list[GalleryRef] | None, *,
                              force: bool) -> InstalledBackend:
        async with self.lock(name):
            if not force and (found := await self.find(name)) is not None:
                return found  # installed while this caller waited for the lock
            shared = self._installs.get(name)
            return await self._install(name, galleries, shared.listeners if shared else [])

    async def _install(self, name: str, galleries: list[GalleryRef] | None,
                       listeners: list[ProgressListener]) -> InstalledBackend:
        refs = self.galleries if galleries is None else galleries

        def fan_out(phase: str, file_name: str, current: int, total: int, is_bytes: bool) -> None:
            for listener in list(listeners):
                listener(phase, file_name, current, total, is_bytes)

        def blocking() -> InstalledBackend:
            entry, ref = find_entry(name, refs, self.timeout_s)
            self.installer.install(entry, ref, fan_out)
            installed = self.registry.find(entry.name)
            if installed is None:
                raise InstallError(f"backend {entry.name!r} was installed but is not found under "
                                   f"{self.registry.backends_path}")
            return installed

        log.info("installing backend %s from %s", name, ", ".join(r.url for r in refs) or "no gallery")
        installed = await asyncio.to_thread(blocking)
        log.info("backend %s installed in %s", name, installed.directory)
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
