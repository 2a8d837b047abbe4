"""VRAM estimate of a GGUF model: weights (the file) + KV cache at the configured context size.

The four integers it needs come from the GGUF header only (`gguf_header`, cached per path, size
and mtime): a few ms for any file size. Async callers use `estimate_vram_bytes_off_loop`.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from corral.models.gguf_header import GGUFHeader, GGUFHeaderError, cached_gguf_header

log = logging.getLogger(__name__)

KV_BYTES_PER_ELEMENT = 2  # f16 cache
DEFAULT_CONTEXT_TOKENS = 8192
ARCH_KEY = "general.architecture"


def arch_keys(arch: str) -> tuple[str, ...]:
    return (
        f"{arch}.block_count",
        f"{arch}.embedding_length",
        f"{arch}.attention.head_count",
        f"{arch}.attention.head_count_kv",
    )


def kv_bytes_per_token(header: GGUFHeader) -> int:
    """Bytes of f16 K and V cache per context token; 0 when the header lacks the shape."""
    arch = header.str_field(ARCH_KEY)
    if arch is None:
        return 0
    layers_key, embd_key, heads_key, heads_kv_key = arch_keys(arch)
    layers, embd, heads = (
        header.int_field(layers_key),
        header.int_field(embd_key),
        header.int_field(heads_key),
    )
    heads_kv = header.int_field(heads_kv_key) or heads
    if (
        layers is None
        or embd is None
        or heads is None
        or heads_kv is None
        or min(layers, embd, heads, heads_kv) <= 0
    ):
        return 0
    return 2 * layers * heads_kv * (embd // heads) * KV_BYTES_PER_ELEMENT


def _read_kv_bytes_per_token(path: Path) -> int:
    arch = cached_gguf_header(path, (ARCH_KEY,)).str_field(ARCH_KEY)
    if arch is None:
        return 0
    return kv_bytes_per_token(cached_gguf_header(path, (ARCH_KEY, *arch_keys(arch))))


def estimate_vram_bytes(model_file: Path | None, context_tokens: int) -> int:
    """0 when unknown (no local GGUF): placement then ignores VRAM fit. Reads the header (file I/O)."""
    if model_file is None or model_file.suffix != ".gguf" or not model_file.is_file():
        return 0
    size = model_file.stat().st_size
    try:
        per_token = _read_kv_bytes_per_token(model_file)
    except (OSError, GGUFHeaderError) as exc:  # a corrupt or unusual file must not break placement
        log.debug("cannot read GGUF metadata of %s: %s", model_file, exc)
        per_token = 0
    return size + per_token * (context_tokens or DEFAULT_CONTEXT_TOKENS)


async def estimate_vram_bytes_off_loop(model_file: Path | None, context_tokens: int) -> int:
    """`estimate_vram_bytes` in a thread: its stat calls and header read stay off the event loop."""
    return await asyncio.to_thread(estimate_vram_bytes, model_file, context_tokens)
