"""The `sentencetransformers` gallery backend installed for tests, once per session (support/gallery_installs.py):
its virtual environment is torch CPU + sentence-transformers, ~1.4 GB, one to several minutes. Every test that
needs the engine shares the result: gRPC tests start its `run.sh`, e2e workers get its backends directory as
`--backends-path`. Also the all-MiniLM-L6-v2 model files and the reference vectors they are checked against.
"""

from __future__ import annotations

import json
from pathlib import Path

from corral.models.defaults import MINILM_ST_NAME, prepare_minilm_sentence_transformers
from support import gallery_installs

NAME = "sentencetransformers"
REFERENCE_VECTORS = (
    Path(__file__).resolve().parent.parent / "integration" / "gallery" / "minilm_st_reference.json"
)


def backends_path(session_root: Path) -> tuple[Path, float | None]:
    """A backends directory holding the installed backend; the install's seconds (None: already there)."""
    root, seconds = gallery_installs.backends_path(session_root, (NAME,))
    return root, seconds.get(NAME)


def prepare_model(models_dir: Path) -> Path:
    """The all-MiniLM-L6-v2 sentence-transformers directory and its YAML in `models_dir`; returns the directory."""
    prepare_minilm_sentence_transformers(models_dir)
    return models_dir / MINILM_ST_NAME


def reference_vectors() -> dict[str, list[float]]:
    """Vectors sentence-transformers 6.2.0 computed for a few sentences from the same weights."""
    return dict(json.loads(REFERENCE_VECTORS.read_text())["sentences"])


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm_a: float = sum(x * x for x in a) ** 0.5
    norm_b: float = sum(y * y for y in b) ** 0.5
    return dot / (norm_a * norm_b)
