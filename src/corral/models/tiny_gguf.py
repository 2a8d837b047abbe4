"""A tiny llama-architecture GGUF with random weights, for tests.

The model is useless as a language model but exercises every llama.cpp code path the
serving stack uses: completion, chat (ChatML template embedded in the file), streaming and
mean-pooled embeddings. Output is byte-identical for a given seed.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np

N_LAYERS = 2
EMBEDDING_DIM = 64
N_HEADS = 4
N_KV_HEADS = 2
FEED_FORWARD_DIM = 128
CONTEXT_TOKENS = 512
HEAD_DIM = EMBEDDING_DIM // N_HEADS
RMS_NORM_EPS = 1e-5
ROPE_FREQ_BASE = 10000.0

UNK, BOS, EOS = "<unk>", "<s>", "</s>"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
SPACE = "\u2581"

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_WORDS = (
    "the be to of and a in that have I it for not on with he as you do at this but his by from "
    "they we say her she or an will my one all would there their what so up out if about who "
    "get which go me hello world model test token chat user assistant system yes no ok"
).split()
_PUNCTUATION = list(".,!?;:'\"()-[]{}<>/\\@#$%^&*_+=|~`")

_FILE_TYPES = {
    "f32": (gguf.LlamaFileType.ALL_F32, np.float32),
    "f16": (gguf.LlamaFileType.MOSTLY_F16, np.float16),
}


def tiny_vocab() -> tuple[list[str], list[float], list[int]]:
    """Return (tokens, scores, token_types) of the toy SentencePiece vocabulary."""
    tokens = [UNK, BOS, EOS, IM_START, IM_END]
    types = [gguf.TokenType.UNKNOWN] + [gguf.TokenType.CONTROL] * 4
    tokens += [f"<0x{byte:02X}>" for byte in range(256)]
    types += [gguf.TokenType.BYTE] * 256

    pieces: list[str] = [SPACE]
    pieces += [chr(c) for c in range(ord("a"), ord("z") + 1)]
    pieces += [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    pieces += [str(d) for d in range(10)] + _PUNCTUATION
    for word in _WORDS:
        # Every prefix must exist so the SPM merge loop can reach the whole word.
        pieces += [SPACE + word[:n] for n in range(1, len(word) + 1)]
    pieces += [SPACE + str(d) for d in range(10)]
    unique_pieces = list(dict.fromkeys(p for p in pieces if p not in tokens))
    tokens += unique_pieces
    types += [gguf.TokenType.NORMAL] * len(unique_pieces)

    # Longer pieces score higher, so the tokenizer prefers whole words.
    scores = [0.0] * (5 + 256) + [float(len(p)) - i * 1e-4 for i, p in enumerate(unique_pieces)]
    return tokens, scores, [int(t) for t in types]


def _random_tensors(seed: int, n_vocab: int, dtype: type) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def matrix(rows: int, cols: int) -> np.ndarray:
        weights: np.ndarray = (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(dtype)
        return weights

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    kv_dim = N_KV_HEADS * HEAD_DIM
    tensors = {"token_embd.weight": matrix(n_vocab, EMBEDDING_DIM)}
    for layer in range(N_LAYERS):
        prefix = f"blk.{layer}."
        tensors[prefix + "attn_norm.weight"] = ones(EMBEDDING_DIM)
        tensors[prefix + "attn_q.weight"] = matrix(EMBEDDING_DIM, EMBEDDING_DIM)
        tensors[prefix + "attn_k.weight"] = matrix(kv_dim, EMBEDDING_DIM)
        tensors[prefix + "attn_v.weight"] = matrix(kv_dim, EMBEDDING_DIM)
        tensors[prefix + "attn_output.weight"] = matrix(EMBEDDING_DIM, EMBEDDING_DIM)
        tensors[prefix + "ffn_norm.weight"] = ones(EMBEDDING_DIM)
        tensors[prefix + "ffn_gate.weight"] = matrix(FEED_FORWARD_DIM, EMBEDDING_DIM)
        tensors[prefix + "ffn_up.weight"] = matrix(FEED_FORWARD_DIM, EMBEDDING_DIM)
        tensors[prefix + "ffn_down.weight"] = matrix(EMBEDDING_DIM, FEED_FORWARD_DIM)
    tensors["output_norm.weight"] = ones(EMBEDDING_DIM)
    tensors["output.weight"] = matrix(n_vocab, EMBEDDING_DIM)
    return tensors


def _write_gguf(path: Path, seed: int, dtype: str) -> None:
    file_type, np_dtype = _FILE_TYPES[dtype]
    tokens, scores, token_types = tiny_vocab()
    writer = gguf.GGUFWriter(path, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LLAMA])
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(f"corral-tiny-llama-seed{seed}")
    writer.add_file_type(file_type)
    writer.add_context_length(CONTEXT_TOKENS)
    writer.add_embedding_length(EMBEDDING_DIM)
    writer.add_block_count(N_LAYERS)
    writer.add_feed_forward_length(FEED_FORWARD_DIM)
    writer.add_head_count(N_HEADS)
    writer.add_head_count_kv(N_KV_HEADS)
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_rope_freq_base(ROPE_FREQ_BASE)
    writer.add_layer_norm_rms_eps(RMS_NORM_EPS)
    writer.add_vocab_size(len(tokens))
    writer.add_pooling_type(gguf.PoolingType.MEAN)

    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(token_types)
    writer.add_unk_token_id(tokens.index(UNK))
    writer.add_bos_token_id(tokens.index(BOS))
    writer.add_eos_token_id(tokens.index(IM_END))
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(CHATML_TEMPLATE)

    for name, data in _random_tensors(seed, len(tokens), np_dtype).items():
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _same_bytes(a: Path, b: Path) -> bool:
    if a.stat().st_size != b.stat().st_size:
        return False
    return a.read_bytes() == b.read_bytes()


def write_generated(path: Path, write: Callable[[Path], object]) -> Path:
    """Write a generated file with `write(temporary path)` and move it to `path` atomically; an identical file
    already there is kept (its mtime too), so a re-run of a deterministic generator changes nothing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        if path.exists() and _same_bytes(tmp, path):
            return path
        tmp.chmod(0o644)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_tiny_llama(path: Path, *, seed: int = 0, dtype: str = "f16") -> Path:
    """Write the tiny model to `path` (dtype "f16" or "f32"); keep an identical existing file."""
    if dtype not in _FILE_TYPES:
        raise ValueError(f"tiny model dtype must be one of {sorted(_FILE_TYPES)}, got {dtype!r}")
    return write_generated(path, lambda tmp: _write_gguf(tmp, seed, dtype))


def generator_main(argv: list[str] | None, module: str, write: Callable[[Path], Path]) -> int:
    """The command line of a generated-model module: `python -m <module> OUT.gguf` writes one file."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: python -m {module} OUT.gguf", file=sys.stderr)
        return 2
    out = write(Path(args[0]))
    print(f"wrote {out} ({out.stat().st_size} bytes)")
    return 0


def main(argv: list[str] | None = None) -> int:
    return generator_main(argv, "corral.models.tiny_gguf", write_tiny_llama)


if __name__ == "__main__":
    raise SystemExit(main())
