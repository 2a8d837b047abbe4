"""The `diffusers` gallery backend installed for tests, once per session, and the tiny generated pipeline.

Installed the way a worker installs it on demand: the entry of corral's own gallery (`index.yaml`)
through the gallery installer, which copies the backend directory and the shared `common/` code and
builds its virtual environment from `requirements.txt` (torch CPU + diffusers, ~1 GB; about 40 s
when pip has the wheels cached, minutes when it fetches diffusers and transformers). Developers can
keep it between runs with $CORRAL_TEST_BACKEND_CACHE (a directory; reinstalled when a file of the
backend or of common/ changes).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path

import corral
from corral.gallery.index import DEFAULT_INDEX, GalleryRef, find_entry
from corral.gallery.installer import BackendInstaller

NAME = "diffusers"
BACKENDS = Path(corral.__file__).resolve().parent / "gallery" / "backends"
SOURCES = (BACKENDS / NAME, BACKENDS / "common")
INSTALL_TIMEOUT_S = 600  # one stalled pip read (the installer's per-read budget)
CACHE_ENV = "CORRAL_TEST_BACKEND_CACHE"
ARCHITECTURE_CHECK = Path(__file__).resolve().parent / "diffusers_architecture_check.py"


def _sources_digest() -> str:
    files = sorted(p for source in SOURCES for p in source.iterdir() if p.is_file())
    return hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in files)).hexdigest()[:16]


def backends_path(session_root: Path) -> tuple[Path, float | None]:
    """A backends directory holding the installed backend; the install's seconds (None: already there)."""
    cache = os.environ.get(CACHE_ENV, "")
    if not cache:
        return session_root, install(session_root)
    root = Path(cache) / f"{NAME}-{_sources_digest()}"
    if (root / NAME / "metadata.json").is_file():
        return root, None
    return root, install(root)


def install(root: Path) -> float:
    """Install the gallery entry into `root/diffusers` with corral's installer; the seconds it took."""
    entry, ref = find_entry(NAME, [GalleryRef(name="corral", url=str(DEFAULT_INDEX))], timeout_s=60)
    started_s = time.monotonic()
    BackendInstaller(root, require_integrity=False, timeout_s=INSTALL_TIMEOUT_S).install(entry, ref)
    return time.monotonic() - started_s


def check_architecture(backend_dir: Path, pipeline_dir: Path) -> subprocess.CompletedProcess[str]:
    """Run the architecture check with the backend venv's python (it has torch and diffusers; corral has not)."""
    return subprocess.run(
        [str(backend_dir / "venv" / "bin" / "python"), str(ARCHITECTURE_CHECK), str(pipeline_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
