"""The `sentencetransformers` gallery backend installed for tests, once per session.

Installed the way a worker installs it on demand: the entry of corral's own gallery (`index.yaml`)
through the gallery installer, which copies the backend directory and builds its virtual environment
from `requirements.txt` (torch CPU + sentence-transformers, ~1.4 GB, one to several minutes). Every
test that needs the engine shares the result: gRPC tests start its `run.sh`, e2e workers get its
backends directory as `--backends-path`. Developers can keep it between runs with
$CORRAL_TEST_BACKEND_CACHE (a directory; reinstalled when a file of the backend changes).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import corral
from corral.gallery.index import DEFAULT_INDEX, GalleryRef, find_entry
from corral.gallery.installer import BackendInstaller
from corral.models.defaults import MINILM_ST_NAME, prepare_minilm_sentence_transformers

NAME = "sentencetransformers"
SOURCE = Path(corral.__file__).resolve().parent / "gallery" / "backends" / NAME
COMMON = SOURCE.parent / "common"  # installed beside it as common/
INSTALL_TIMEOUT_S = 600  # one stalled pip read (the installer's per-read budget)
CACHE_ENV = "CORRAL_TEST_BACKEND_CACHE"
REFERENCE_VECTORS = (
    Path(__file__).resolve().parent.parent / "integration" / "gallery" / "minilm_st_reference.json"
)


def backends_path(session_root: Path) -> tuple[Path, float | None]:
    """A backends directory holding the installed backend; the install's seconds (None: already there)."""
    cache = os.environ.get(CACHE_ENV, "")
    if not cache:
        return session_root, install(session_root)
    files = [p for d in (SOURCE, COMMON) for p in sorted(d.iterdir()) if p.is_file()]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in files)).hexdigest()[:16]
    root = Path(cache) / f"{NAME}-{digest}"
    if (root / NAME / "metadata.json").is_file():
        return root, None
    return root, install(root)


def install(root: Path) -> float:
    """Install the gallery entry into `root/sentencetransformers` with corral's installer; the seconds it took."""
    entry, ref = find_entry(NAME, [GalleryRef(name="corral", url=str(DEFAULT_INDEX))], timeout_s=60)
    started_s = time.monotonic()
    BackendInstaller(root, require_integrity=False, timeout_s=INSTALL_TIMEOUT_S).install(entry, ref)
    return time.monotonic() - started_s


def prepare_model(models_dir: Path) -> Path:
    """The all-MiniLM-L6-v2 sentence-transformers directory and its YAML in `models_dir`; returns the directory."""
    prepare_minilm_sentence_transformers(models_dir)
    return models_dir / MINILM_ST_NAME


def reference_vectors() -> dict[str, list[float]]:
    """Vectors sentence-transformers 6.2.0 computed for a few sentences from the same weights."""
    return dict(json.loads(REFERENCE_VECTORS.read_text())["sentences"])


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm_a = sum(x * x for x in a) ** 0.5
    norm_b = sum(y * y for y in b) ** 0.5
    return dot / (norm_a * norm_b)
