"""A tiny LLaVA-1.5-style vision projector (mmproj) GGUF with random weights, for tests.

Paired with the tiny llama of `tiny_gguf` it drives llama.cpp's whole image path for real:
image bytes -> mtmd bitmap -> fixed-size resize -> CLIP ViT (class embedding, pre-layernorm,
two blocks) -> "mlp" projector (mm.0 -> GELU -> mm.2) -> image embeddings in the text model's
context. The embeddings are noise, but they depend on the pixels, so different images steer
generation differently. Output is byte-identical for a given seed.

clip.cpp resizes (and pads) every image to IMAGE_SIZE x IMAGE_SIZE and gives one embedding per
patch, so an image is always IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2 tokens (the class
token is dropped). Like LLaVA, clip.cpp runs only the first block_count - 1 blocks (it takes
the penultimate layer's features); the last block is written because the loader requires it.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from corral.models.tiny_gguf import EMBEDDING_DIM, generator_main, write_generated

PROJECTOR_TYPE = "mlp"
IMAGE_SIZE = 32
PATCH_SIZE = 8
IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2
VISION_DIM = 32
VISION_HEADS = 4
VISION_FEED_FORWARD_DIM = 64  # must differ from VISION_DIM: clip.cpp swaps up/down when they look swapped
VISION_BLOCKS = 2
PROJECTOR_HIDDEN_DIM = 64
LAYER_NORM_EPS = 1e-5
# OpenAI CLIP's pixel normalisation, as in every LLaVA-1.5 mmproj.
IMAGE_MEAN = (0.48145466, 0.4578275, 0.40821073)
IMAGE_STD = (0.26862954, 0.26130258, 0.27577711)


def _random_tensors(seed: int, text_embedding_dim: int) -> dict[str, np.ndarray]:
    """Tensors in PyTorch/numpy shape order (gguf reverses them into ggml's ne order)."""
    rng = np.random.default_rng(seed)

    def matrix(rows: int, cols: int) -> np.ndarray:
        weights: np.ndarray = (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float16)
        return weights

    def vector(n: int, scale: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(n) * scale).astype(np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    n_positions = IMAGE_TOKENS + 1  # the class embedding takes position 0
    patch_inputs = 3 * PATCH_SIZE * PATCH_SIZE
    patch_kernel = rng.standard_normal((VISION_DIM, 3, PATCH_SIZE, PATCH_SIZE)) / np.sqrt(patch_inputs)
    tensors = {
        "v.patch_embd.weight": patch_kernel.astype(np.float16),
        "v.class_embd": vector(VISION_DIM, 1.0),
        "v.position_embd.weight": (rng.standard_normal((n_positions, VISION_DIM)) * 0.1).astype(np.float32),
        "v.pre_ln.weight": ones(VISION_DIM),
        "v.pre_ln.bias": vector(VISION_DIM),
    }
    for layer in range(VISION_BLOCKS):
        prefix = f"v.blk.{layer}."
        for norm in ("ln1", "ln2"):
            tensors[prefix + norm + ".weight"] = ones(VISION_DIM)
            tensors[prefix + norm + ".bias"] = vector(VISION_DIM)
        for attn in ("attn_q", "attn_k", "attn_v", "attn_out"):
            tensors[prefix + attn + ".weight"] = matrix(VISION_DIM, VISION_DIM)
            tensors[prefix + attn + ".bias"] = vector(VISION_DIM)
        tensors[prefix + "ffn_up.weight"] = matrix(VISION_FEED_FORWARD_DIM, VISION_DIM)
        tensors[prefix + "ffn_up.bias"] = vector(VISION_FEED_FORWARD_DIM)
        tensors[prefix + "ffn_down.weight"] = matrix(VISION_DIM, VISION_FEED_FORWARD_DIM)
        tensors[prefix + "ffn_down.bias"] = vector(VISION_DIM)
    tensors["mm.0.weight"] = matrix(PROJECTOR_HIDDEN_DIM, VISION_DIM)
    tensors["mm.0.bias"] = vector(PROJECTOR_HIDDEN_DIM)
    tensors["mm.2.weight"] = matrix(text_embedding_dim, PROJECTOR_HIDDEN_DIM)
    tensors["mm.2.bias"] = vector(text_embedding_dim)
    return tensors


def _write_gguf(path: Path, seed: int, text_embedding_dim: int) -> None:
    writer = gguf.GGUFWriter(path, "clip")
    writer.add_type(gguf.GGUFType.MMPROJ)
    writer.add_name(f"corral-tiny-mmproj-seed{seed}")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_clip_has_vision_encoder(True)
    writer.add_bool(gguf.Keys.Clip.HAS_LLAVA_PROJECTOR, True)
    writer.add_clip_projector_type(PROJECTOR_TYPE)
    writer.add_vision_image_size(IMAGE_SIZE)
    writer.add_vision_patch_size(PATCH_SIZE)
    writer.add_vision_embedding_length(VISION_DIM)
    writer.add_vision_feed_forward_length(VISION_FEED_FORWARD_DIM)
    writer.add_vision_block_count(VISION_BLOCKS)
    writer.add_vision_head_count(VISION_HEADS)
    writer.add_vision_projection_dim(text_embedding_dim)
    writer.add_vision_attention_layernorm_eps(LAYER_NORM_EPS)
    writer.add_vision_image_mean(list(IMAGE_MEAN))
    writer.add_vision_image_std(list(IMAGE_STD))
    writer.add_vision_use_gelu(False)  # CLIP's quick GELU inside the blocks; the projector always uses GELU

    for name, data in _random_tensors(seed, text_embedding_dim).items():
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_tiny_mmproj(path: Path, *, text_embedding_dim: int = EMBEDDING_DIM, seed: int = 0) -> Path:
    """Write the tiny projector to `path` for a text model of that embedding size; keep an identical file."""
    if text_embedding_dim < 1:
        raise ValueError(f"text_embedding_dim must be a positive integer, got {text_embedding_dim!r}")
    return write_generated(path, lambda tmp: _write_gguf(tmp, seed, text_embedding_dim))


def main(argv: list[str] | None = None) -> int:
    return generator_main(argv, "corral.models.tiny_mmproj", write_tiny_mmproj)


if __name__ == "__main__":
    raise SystemExit(main())
