"""The tiny test model and model config files, checked without llama.cpp."""

from pathlib import Path
from typing import Any

import gguf
import pytest
import yaml

from corral.models.defaults import model_yaml, write_tiny_model_config
from corral.models.tiny_gguf import main, tiny_vocab, write_tiny_llama


def _field(reader: gguf.GGUFReader, key: str) -> Any:
    field = reader.get_field(key)
    if field is None:
        raise KeyError(key)
    return field.contents()


def test_tiny_model_is_a_small_llama_gguf(tmp_path: Path) -> None:
    path = write_tiny_llama(tmp_path / "tiny.gguf")

    reader = gguf.GGUFReader(path)
    assert _field(reader, "general.architecture") == "llama"
    assert _field(reader, "llama.block_count") == 2
    assert _field(reader, "llama.embedding_length") == 64
    assert _field(reader, "llama.attention.head_count") == 4
    assert _field(reader, "llama.attention.head_count_kv") == 2
    assert _field(reader, "llama.context_length") == 512
    assert _field(reader, "llama.pooling_type") == int(gguf.PoolingType.MEAN)
    assert 200_000 < path.stat().st_size < 600_000


def test_tiny_model_vocab_has_chatml_controls_and_all_byte_fallbacks(tmp_path: Path) -> None:
    reader = gguf.GGUFReader(write_tiny_llama(tmp_path / "tiny.gguf"))

    tokens = _field(reader, "tokenizer.ggml.tokens")
    assert _field(reader, "tokenizer.ggml.model") == "llama"
    assert tokens[:5] == ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    assert {f"<0x{b:02X}>" for b in range(256)} <= set(tokens)
    assert tokens[_field(reader, "tokenizer.ggml.eos_token_id")] == "<|im_end|>"
    assert "\u2581hello" in tokens
    assert "<|im_start|>" in _field(reader, "tokenizer.chat_template")


def test_every_word_piece_is_reachable_through_its_prefixes() -> None:
    tokens, scores, types = tiny_vocab()

    pieces = {t for t, kind in zip(tokens, types, strict=True) if kind == gguf.TokenType.NORMAL}
    for piece in pieces:
        assert all(piece[:n] in pieces for n in range(1, len(piece))), piece
    assert len(tokens) == len(scores) == len(set(tokens))


def test_same_seed_writes_identical_bytes_and_other_seeds_differ(tmp_path: Path) -> None:
    first = write_tiny_llama(tmp_path / "a.gguf", seed=7).read_bytes()
    again = write_tiny_llama(tmp_path / "b.gguf", seed=7).read_bytes()
    other = write_tiny_llama(tmp_path / "c.gguf", seed=8).read_bytes()

    assert first == again
    assert first != other


def test_rewriting_an_identical_model_leaves_the_file_untouched(tmp_path: Path) -> None:
    path = write_tiny_llama(tmp_path / "tiny.gguf")
    before_ns = path.stat().st_mtime_ns
    inode = path.stat().st_ino

    write_tiny_llama(path)

    assert (path.stat().st_mtime_ns, path.stat().st_ino) == (before_ns, inode)
    assert [p.name for p in tmp_path.iterdir()] == ["tiny.gguf"]


def test_f32_model_is_larger_than_f16(tmp_path: Path) -> None:
    f16 = write_tiny_llama(tmp_path / "f16.gguf", dtype="f16").stat().st_size
    f32 = write_tiny_llama(tmp_path / "f32.gguf", dtype="f32").stat().st_size

    assert f32 > 1.5 * f16


def test_unknown_dtype_is_rejected_with_the_allowed_values(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="f16"):
        write_tiny_llama(tmp_path / "x.gguf", dtype="q4")


def test_command_line_writes_the_named_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "cli.gguf")]) == 0

    assert (tmp_path / "cli.gguf").is_file()
    assert "cli.gguf" in capsys.readouterr().out


def test_tiny_model_config_points_at_its_gguf(tmp_path: Path) -> None:
    yaml_path = write_tiny_model_config(tmp_path, "tiny-chat")

    config = yaml.safe_load(yaml_path.read_text())
    assert yaml_path == tmp_path / "tiny-chat.yaml"
    assert config == {
        "name": "tiny-chat",
        "backend": "llama-cpp",
        "context_size": 512,
        "parameters": {"model": "tiny-chat.gguf"},
    }
    assert (tmp_path / "tiny-chat.gguf").is_file()


def test_embedding_config_says_embeddings_true(tmp_path: Path) -> None:
    yaml_path = write_tiny_model_config(tmp_path, "tiny-embed", embeddings=True)

    assert yaml.safe_load(yaml_path.read_text())["embeddings"] is True


def test_model_config_text_matches_the_documented_shape() -> None:
    text = model_yaml(
        "gemma-3-270m", "gemma-3-270m-q4_k_m.gguf", context_size=2048, options=("chat_format:gemma",)
    )

    assert text == (
        "name: gemma-3-270m\n"
        "backend: llama-cpp\n"
        "context_size: 2048\n"
        "parameters:\n"
        "  model: gemma-3-270m-q4_k_m.gguf\n"
        "options:\n"
        "  - chat_format:gemma\n"
    )


def test_model_names_that_would_break_yaml_or_paths_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="model name"):
        write_tiny_model_config(tmp_path, "../evil: yes")
    assert list(tmp_path.iterdir()) == []
