"""A tiny BERT cross-encoder (reranker) GGUF with generated weights, for tests.

Laid out as llama.cpp's `convert_hf_to_gguf.py` writes a BERT reranker such as ms-marco-MiniLM: a WordPiece
vocabulary in "phantom space" form, `pooling_type` RANK, one classifier label, and the sequence-classification
head (`cls` dense + tanh, then `cls.output` to one score). llama.cpp's rank pooling reads the [CLS] row through
that head, exactly as it does for a real reranker, so the engine's rerank path runs for real. The weights are
seeded random numbers: scores are deterministic for a seed but carry no meaning (no cross-encoder weights are
packaged on the registries this project installs from).

The vocabulary holds [PAD] [UNK] [CLS] [SEP] [MASK], every ASCII letter and digit as a word start (`▁a`) and as a
continuation (`a`), punctuation, and a few hundred whole words, so any lowercase ASCII text tokenizes without
[UNK]. About 0.25 MB; writes in well under a second.

`rerank_template`: a `tokenizer.chat_template.rerank` string (placeholders `{query}` and `{document}`, special
tokens by name) that llama.cpp formats each pair with instead of `[CLS] query [SEP] document [SEP]`.
"""

from __future__ import annotations

import string
from pathlib import Path

import gguf
import numpy as np

from corral.models.tiny_gguf import generator_main, write_generated

N_LAYERS = 2
EMBEDDING_DIM = 32
N_HEADS = 2
FEED_FORWARD_DIM = 64
CONTEXT_TOKENS = 1024  # above llama.cpp's default micro-batch, so a test can load a batch size beyond it
TOKEN_TYPES = 2
LAYER_NORM_EPS = 1e-12
SPACE = "\u2581"
PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"

_WORDS = (
    "the be to of and a in that have i it for not on with he as you do at this but his by from they we say her "
    "she or an will my one all would there their what so up out if about who get which go me when make can like "
    "time no just him know take people into year your good some could them see other than then now look only "
    "come its over think also back after use two how our work first well way even new want because any these "
    "give day most us is are was were been has had did does "
    "quick brown fox jumps lazy dog cat animal animals pet pets bark barks run runs jump "
    "paris capital city france germany berlin country river rain weather sunny cold warm "
    "model models serve serves serving language server cluster worker workers grpc request requests "
    "query document documents rank ranking rerank relevance score search answer question"
).split()

_FILE_TYPES = {
    "f32": (gguf.LlamaFileType.ALL_F32, np.float32),
    "f16": (gguf.LlamaFileType.MOSTLY_F16, np.float16),
}


def tiny_wordpiece_vocab() -> tuple[list[str], list[int]]:
    """(tokens in llama.cpp's phantom-space WordPiece form, token types); ids 0-4 are the specials."""
    tokens = [PAD, UNK, CLS, SEP, MASK]
    types = [gguf.TokenType.CONTROL] * len(tokens)
    symbols = string.ascii_lowercase + string.digits
    pieces = [SPACE + c for c in symbols + string.punctuation] + list(symbols)
    pieces += [SPACE + word for word in _WORDS]
    unique = list(dict.fromkeys(pieces))
    tokens += unique
    types += [gguf.TokenType.NORMAL] * len(unique)
    return tokens, [int(t) for t in types]


def _random_tensors(seed: int, n_vocab: int, dtype: type) -> dict[str, np.ndarray]:
    """The BERT tensors llama.cpp loads (models/bert.cpp) plus the classifier head, seeded."""
    rng = np.random.default_rng(seed)

    def matrix(rows: int, cols: int, kind: type = dtype) -> np.ndarray:
        weights: np.ndarray = (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(kind)
        return weights

    def vector(n: int, value: float) -> np.ndarray:
        return np.full(n, value, dtype=np.float32)

    dim, ff = EMBEDDING_DIM, FEED_FORWARD_DIM
    tensors = {
        "token_embd.weight": matrix(n_vocab, dim),
        "token_types.weight": matrix(
            TOKEN_TYPES, dim, np.float32
        ),  # f32, as llama.cpp's converter keeps them
        "position_embd.weight": matrix(CONTEXT_TOKENS, dim, np.float32),
        "token_embd_norm.weight": vector(dim, 1.0),
        "token_embd_norm.bias": vector(dim, 0.0),
    }
    for layer in range(N_LAYERS):
        blk = f"blk.{layer}."
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            tensors[blk + name + ".weight"] = matrix(dim, dim)
            tensors[blk + name + ".bias"] = vector(dim, 0.0)
        tensors[blk + "attn_output_norm.weight"] = vector(dim, 1.0)
        tensors[blk + "attn_output_norm.bias"] = vector(dim, 0.0)
        tensors[blk + "ffn_up.weight"] = matrix(ff, dim)
        tensors[blk + "ffn_up.bias"] = vector(ff, 0.0)
        tensors[blk + "ffn_down.weight"] = matrix(dim, ff)
        tensors[blk + "ffn_down.bias"] = vector(dim, 0.0)
        tensors[blk + "layer_output_norm.weight"] = vector(dim, 1.0)
        tensors[blk + "layer_output_norm.bias"] = vector(dim, 0.0)
    # BertForSequenceClassification's head as llama.cpp names it: dense + tanh, then one output label
    tensors["cls.weight"] = matrix(dim, dim, np.float32)
    tensors["cls.bias"] = (rng.standard_normal(dim) * 0.1).astype(np.float32)
    tensors["cls.output.weight"] = matrix(1, dim, np.float32)
    tensors["cls.output.bias"] = vector(1, 0.0)
    return tensors


def _write_gguf(path: Path, seed: int, dtype: str, rerank_template: str | None) -> None:
    file_type, np_dtype = _FILE_TYPES[dtype]
    tokens, token_types = tiny_wordpiece_vocab()
    writer = gguf.GGUFWriter(path, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.BERT])
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(f"corral-tiny-reranker-seed{seed}")
    writer.add_file_type(file_type)
    writer.add_block_count(N_LAYERS)
    writer.add_context_length(CONTEXT_TOKENS)
    writer.add_embedding_length(EMBEDDING_DIM)
    writer.add_feed_forward_length(FEED_FORWARD_DIM)
    writer.add_head_count(N_HEADS)
    writer.add_layer_norm_eps(LAYER_NORM_EPS)
    writer.add_causal_attention(False)
    writer.add_pooling_type(gguf.PoolingType.RANK)
    writer.add_classifier_output_labels(["relevance"])

    writer.add_token_type_count(TOKEN_TYPES)
    writer.add_tokenizer_model("bert")
    writer.add_tokenizer_pre("bert-bge")
    writer.add_token_list(tokens)
    writer.add_token_types(token_types)
    # the special ids and add_* flags llama.cpp's converter writes for a BERT reranker: [CLS] q [SEP] d [SEP]
    writer.add_bos_token_id(tokens.index(CLS))
    writer.add_eos_token_id(tokens.index(SEP))
    writer.add_unk_token_id(tokens.index(UNK))
    writer.add_sep_token_id(tokens.index(SEP))
    writer.add_pad_token_id(tokens.index(PAD))
    writer.add_mask_token_id(tokens.index(MASK))
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(True)
    writer.add_add_sep_token(False)
    if rerank_template is not None:
        writer.add_chat_template([{"name": "rerank", "template": rerank_template}])

    for name, data in _random_tensors(seed, len(tokens), np_dtype).items():
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_tiny_reranker(
    path: Path, *, seed: int = 0, dtype: str = "f32", rerank_template: str | None = None
) -> Path:
    """Write the tiny reranker to `path` ("f32" or "f16" matrices); an identical existing file is kept."""
    if dtype not in _FILE_TYPES:
        raise ValueError(f"tiny reranker dtype must be one of {sorted(_FILE_TYPES)}, got {dtype!r}")
    return write_generated(path, lambda tmp: _write_gguf(tmp, seed, dtype, rerank_template))


def main(argv: list[str] | None = None) -> int:
    return generator_main(argv, "corral.models.tiny_reranker", write_tiny_reranker)


if __name__ == "__main__":
    raise SystemExit(main())
