"""VRAM estimate of a GGUF model: weights (the file) + KV cache at the configured context size."""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path

log = logging.getLogger(__name__)

KV_BYTES_PER_ELEMENT = 2  # f16 cache
DEFAULT_CONTEXT_TOKENS = 8192


@lru_cache(maxsize=256)
def _kv_bytes_per_token(path: str, _mtime_ns: int) -> int:
    from gguf import GGUFReader

    reader = GGUFReader(path)
    arch = _field(reader, "general.architecture")
    if not isinstance(arch, str):
        return 0
    layers = _field(reader, f"{arch}.block_count")
    embd = _field(reader, f"{arch}.embedding_length")
    heads = _field(reader, f"{arch}.attention.head_count")
    heads_kv = _field(reader, f"{arch}.attention.head_count_kv") or heads
    if not all(isinstance(v, int) and v > 0 for v in (layers, embd, heads, heads_kv)):
        return 0
    head_dim = int(embd) // int(heads)  # type: ignore[call-overload]
    return 2 * int(layers) * int(heads_kv) * head_dim * KV_BYTES_PER_ELEMENT  # type: ignore[call-overload]


def _field(reader: object, key: str) -> object:
    field = reader.fields.get(key)  # type: ignore[attr-defined]
    if field is None:
        return None
    value = field.parts[field.data[0]]
    if field.types and field.types[0].name == "STRING":
        return bytes(value).decode(errors="replace")
    return int(value[0]) if len(value) == 1 else None


def estimate_vram_bytes(model_file: Path | None, context_tokens: int) -> int:
    """0 when unknown (no local GGUF): placement then ignores VRAM fit."""
    if model_file is None or model_file.suffix != ".gguf" or not model_file.is_file():
        return 0
    stat = model_file.stat()
    try:
        per_token = _kv_bytes_per_token(str(model_file), stat.st_mtime_ns)
    except Exception as exc:  # a corrupt or unusual file must not break placement
        log.debug("cannot read GGUF metadata of %s: %s", model_file, exc)
        per_token = 0
    return stat.st_size + per_token * (context_tokens or DEFAULT_CONTEXT_TOKENS)
