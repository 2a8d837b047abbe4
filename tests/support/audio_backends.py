"""The `faster-whisper` and `piper` gallery backends installed for tests, once per session.

Installed the way a worker installs them on demand: their entries in corral's own gallery (`index.yaml`)
through the gallery installer, which copies each backend directory with `common/` and builds its virtual
environment from `requirements.txt` (faster-whisper ~620 MB, piper ~290 MB; about a minute each from pip's
cache). Developers can keep them between runs with $CORRAL_TEST_BACKEND_CACHE (a directory; reinstalled
when a file of a backend or of common/ changes).
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path

import corral
from corral.gallery.index import DEFAULT_INDEX, GalleryRef, find_entry
from corral.gallery.installer import BackendInstaller

WHISPER, PIPER = "faster-whisper", "piper"
NAMES = (WHISPER, PIPER)
BACKENDS_SOURCE = Path(corral.__file__).resolve().parent / "gallery" / "backends"
INSTALL_TIMEOUT_S = 600  # one stalled pip read (the installer's per-read budget)
CACHE_ENV = "CORRAL_TEST_BACKEND_CACHE"


def _digest() -> str:
    files = [p for d in (*NAMES, "common") for p in sorted((BACKENDS_SOURCE / d).iterdir()) if p.is_file()]
    return hashlib.sha256(b"".join(p.read_bytes() for p in files)).hexdigest()[:16]


def backends_path(session_root: Path) -> tuple[Path, dict[str, float]]:
    """A backends directory holding both backends; the seconds each install took (none: already there)."""
    cache = os.environ.get(CACHE_ENV, "")
    root = Path(cache) / f"audio-{_digest()}" if cache else session_root
    seconds: dict[str, float] = {}
    for name in NAMES:
        if not (root / name / "metadata.json").is_file():
            seconds[name] = install(root, name)
    return root, seconds


def install(root: Path, name: str) -> float:
    """Install gallery entry `name` into `root/<name>` with corral's installer; the seconds it took."""
    entry, ref = find_entry(name, [GalleryRef(name="corral", url=str(DEFAULT_INDEX))], timeout_s=60)
    started_s = time.monotonic()
    BackendInstaller(root, require_integrity=False, timeout_s=INSTALL_TIMEOUT_S).install(entry, ref)
    return time.monotonic() - started_s


def word_error_rate(reference: str, heard: str) -> float:
    """Word-level Levenshtein distance over the reference's word count (case and punctuation ignored)."""
    ref, hyp = (re.findall(r"[a-z0-9']+", text.lower()) for text in (reference, heard))
    row = list(range(len(hyp) + 1))
    for i, word in enumerate(ref, 1):
        previous, row[0] = row[0], i
        for j, other in enumerate(hyp, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (word != other))
    return row[len(hyp)] / max(1, len(ref))
