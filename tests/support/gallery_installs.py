"""Gallery backends installed for tests: each entry once per session, shared by every test that needs it.

Installed the way a worker installs one on demand: the entry of corral's own gallery (`index.yaml`) through
the gallery installer, which copies the backend directory with the shared `common/` code and builds its
virtual environment from `requirements.txt`. A backends directory (`root`) holds one or more entries; an
entry already there (its metadata.json written) is not installed again, so the first fixture to ask pays and
the rest of the session reuses it. Developers can keep installs between runs with $CORRAL_TEST_BACKEND_CACHE
(a directory; an entry is installed again when a file of its backend or of common/ changes).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence
from pathlib import Path

import corral
from corral.gallery.index import DEFAULT_INDEX, GalleryRef, find_entry
from corral.gallery.installer import BackendInstaller

BACKENDS_SOURCE = Path(corral.__file__).resolve().parent / "gallery" / "backends"
COMMON = "common"  # installed beside every backend as common/
INSTALL_TIMEOUT_S = 600  # one stalled pip read (the installer's per-read budget)
CACHE_ENV = "CORRAL_TEST_BACKEND_CACHE"


def sources_digest(names: Sequence[str]) -> str:
    """A digest of the files of backends `names` and of common/: a change to any of them means a new install."""
    files = [p for d in (*names, COMMON) for p in sorted((BACKENDS_SOURCE / d).iterdir()) if p.is_file()]
    return hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in files)).hexdigest()[:16]


def is_installed(root: Path, name: str) -> bool:
    return (root / name / "metadata.json").is_file()


def backends_path(session_root: Path, names: Sequence[str]) -> tuple[Path, dict[str, float]]:
    """A backends directory holding gallery entries `names`: `session_root`, or under $CORRAL_TEST_BACKEND_CACHE
    when set; the seconds each install took (an entry already there is absent: not installed again)."""
    cache = os.environ.get(CACHE_ENV, "")
    root = Path(cache) / f"{'+'.join(names)}-{sources_digest(names)}" if cache else session_root
    seconds = {name: install(root, name) for name in names if not is_installed(root, name)}
    return root, seconds


def install(root: Path, name: str) -> float:
    """Install gallery entry `name` into `root/<name>` with corral's installer; the seconds it took."""
    entry, ref = find_entry(name, [GalleryRef(name="corral", url=str(DEFAULT_INDEX))], timeout_s=60)
    started_s = time.monotonic()
    BackendInstaller(root, require_integrity=False, timeout_s=INSTALL_TIMEOUT_S).install(entry, ref)
    return time.monotonic() - started_s
