"""Backend install time: a backend installed on demand from a gallery vs the same backend already installed.

In one run, on this machine, with the test gallery (tests/support/galleries.py: a reference-layout
backend — backend.py from backend.proto, the reference's run.sh — and its own venv with one wheel):
  cold      — empty backends path: look up the gallery, copy, create the venv, pip install, publish,
              then start the backend process and wait for its gRPC Health (what `backend.install` does
              on a fresh worker);
  installed — the backend already there (a restarted worker): registry lookup, then the same start.
The ratio cold / installed is the price of installing on demand; `lookup` alone is what an already
installed backend adds to every `backend.install`.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from corral.gallery.index import GalleryRef
from corral.worker.ports import PortAllocator
from corral.worker.supervisor import Supervisor
from support.cluster import free_port
from support.galleries import make_manager, ref_gallery

ROUNDS = 3
LOOKUPS = 200


async def _install_and_start(backends: Path, galleries: list[GalleryRef], key: str) -> float:
    manager = make_manager(backends, galleries)
    base = free_port()
    supervisor = Supervisor(
        PortAllocator(base, base + 10),
        bind_host="127.0.0.1",
        token="bench",
        start_timeout_s=60,
        registry=manager.registry,
    )
    start = time.perf_counter()
    try:
        installed = await manager.ensure("refbackend")
        await supervisor.ensure(key, installed)
        return time.perf_counter() - start
    finally:
        await supervisor.stop_all(force=True)


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="corral-bench-install-") as tmp:
        root = Path(tmp)
        galleries = [GalleryRef("bench", str(ref_gallery(root / "gallery")))]
        cold, installed = [], []
        for i in range(ROUNDS):
            backends = root / f"backends-{i}"
            cold.append(await _install_and_start(backends, galleries, f"m{i}#0"))
            installed.append(await _install_and_start(backends, galleries, f"m{i}#1"))
        manager = make_manager(root / "backends-0", galleries)
        start = time.perf_counter()
        for _ in range(LOOKUPS):
            await manager.ensure("refbackend")
        lookup_ms = (time.perf_counter() - start) / LOOKUPS * 1000
    cold_s, warm_s = statistics.median(cold), statistics.median(installed)
    print(f"backend install, median of {ROUNDS} (install + start to gRPC Health):")
    print(f"  cold (installed from the gallery) : {cold_s:7.2f} s   {[round(x, 2) for x in cold]}")
    print(f"  already installed                 : {warm_s:7.2f} s   {[round(x, 2) for x in installed]}")
    print(f"  ratio cold / installed            : {cold_s / warm_s:7.2f} x")
    print(f"  lookup of an installed backend    : {lookup_ms:7.3f} ms (mean of {LOOKUPS})")


if __name__ == "__main__":
    asyncio.run(main())
