"""VRAM estimate: the file plus the f16 KV cache for the context, from the GGUF header's shape."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.models.gguf_header import GGUFHeader
from corral.models.vram import (
    ARCH_KEY,
    DEFAULT_CONTEXT_TOKENS,
    KV_BYTES_PER_ELEMENT,
    arch_keys,
    estimate_vram_bytes,
    kv_bytes_per_token,
)


def header(arch: object = "llama", **shape: object) -> GGUFHeader:
    fields: dict[str, object] = {ARCH_KEY: arch}
    for name, value in shape.items():
        fields[f"llama.{name.replace('__', '.')}"] = value
    return GGUFHeader(version=3, tensor_count=0, kv_count=len(fields), fields=fields)  # type: ignore[arg-type]


LLAMA_8B = {
    "block_count": 32,
    "embedding_length": 4096,
    "attention__head_count": 32,
    "attention__head_count_kv": 8,
}


def test_the_keys_are_named_by_the_architecture() -> None:
    assert arch_keys("qwen2") == (
        "qwen2.block_count",
        "qwen2.embedding_length",
        "qwen2.attention.head_count",
        "qwen2.attention.head_count_kv",
    )


def test_kv_bytes_per_token_follow_layers_kv_heads_and_head_size() -> None:
    # 2 (K and V) x 32 layers x 8 kv heads x 128 head dim x 2 bytes
    assert kv_bytes_per_token(header(**LLAMA_8B)) == 2 * 32 * 8 * 128 * KV_BYTES_PER_ELEMENT == 131_072


def test_without_a_kv_head_count_every_head_has_its_own_kv() -> None:
    shape = {k: v for k, v in LLAMA_8B.items() if k != "attention__head_count_kv"}
    assert kv_bytes_per_token(header(**shape)) == 2 * 32 * 32 * 128 * KV_BYTES_PER_ELEMENT


@pytest.mark.parametrize(
    "broken",
    [
        {"block_count": None},
        {"block_count": 0},
        {"embedding_length": -4096},
        {"attention__head_count": 0},
        {"attention__head_count_kv": -1},
        {"block_count": "32"},  # a string where a number belongs
        {"block_count": True},  # a bool is not a count
    ],
)
def test_a_header_without_a_usable_shape_gives_zero(broken: dict[str, object]) -> None:
    shape: dict[str, object] = {**LLAMA_8B, **broken}
    assert kv_bytes_per_token(header(**{k: v for k, v in shape.items() if v is not None})) == 0


def test_a_header_without_an_architecture_gives_zero() -> None:
    assert kv_bytes_per_token(header(arch=None, **LLAMA_8B)) == 0
    assert kv_bytes_per_token(header(arch=7, **LLAMA_8B)) == 0


def test_no_file_or_not_a_gguf_means_unknown(tmp_path: Path) -> None:
    assert estimate_vram_bytes(None, 4096) == 0
    assert estimate_vram_bytes(tmp_path / "model.safetensors", 4096) == 0
    assert estimate_vram_bytes(tmp_path / "absent.gguf", 4096) == 0
    assert estimate_vram_bytes(tmp_path, 4096) == 0  # a directory


def test_the_default_context_is_the_reference_8k() -> None:
    assert DEFAULT_CONTEXT_TOKENS == 8192
