"""The `sentencetransformers` gallery backend installed for tests, once per session.

Its virtual environment (torch CPU + sentence-transformers, ~1.4 GB) takes one to two minutes to
build, so the session builds one installed backend directory (`<backends path>/sentencetransformers`
with `run.sh`, `venv/` and `metadata.json`, the layout the gallery installer publishes) and every
test that needs the engine shares it: gRPC tests start its `run.sh`, e2e workers get its parent
directory as `--backends-path`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import corral
from corral.models.defaults import MINILM_ST_NAME, prepare_minilm_sentence_transformers

NAME = "sentencetransformers"
SOURCE = Path(corral.__file__).resolve().parent / "gallery" / "backends" / NAME
PIP_TIMEOUT_S = 480
# A directory kept between runs (developers): venvs are built there once per requirements.txt and linked in.
VENV_CACHE_ENV = "CORRAL_TEST_BACKEND_VENV_CACHE"
REFERENCE_VECTORS = Path(__file__).resolve().parent.parent / "integration" / "gallery" / "minilm_st_reference.json"


def install(backends_path: Path) -> tuple[Path, float]:
    """Copy the backend into `backends_path/sentencetransformers` with a venv built from requirements.txt
    (or linked from $CORRAL_TEST_BACKEND_VENV_CACHE); return the directory and the seconds the venv took."""
    target = backends_path / NAME
    shutil.copytree(SOURCE, target, ignore=shutil.ignore_patterns("venv", "__pycache__"))
    started_s = time.monotonic()
    cache = os.environ.get(VENV_CACHE_ENV, "")
    if cache:
        digest = hashlib.sha256((SOURCE / "requirements.txt").read_bytes()).hexdigest()[:16]
        venv = Path(cache) / f"{NAME}-{digest}"
        if not (venv / ".complete").is_file():
            shutil.rmtree(venv, ignore_errors=True)
            build_venv(venv, SOURCE / "requirements.txt")
            (venv / ".complete").touch()
        (target / "venv").symlink_to(venv)
    else:
        build_venv(target / "venv", target / "requirements.txt")
    seconds = time.monotonic() - started_s
    (target / "metadata.json").write_text(json.dumps({"name": NAME, "uri": str(SOURCE), "version": "test"}))
    return target, seconds


def build_venv(venv: Path, requirements: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-input",
         "-r", str(requirements)],
        capture_output=True, text=True, timeout=PIP_TIMEOUT_S,
    )
    if pip.returncode != 0:
        raise RuntimeError(f"pip install -r {requirements} failed ({pip.returncode}):\n{pip.stderr[-3000:]}")


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
