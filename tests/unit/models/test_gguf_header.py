"""The GGUF header reader returns what gguf.GGUFReader reads, from the header and key-value section only."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import gguf
import pytest

from corral.models.gguf_header import ArrayValue, GGUFHeaderError, cached_gguf_header, read_gguf_header
from corral.models.tiny_gguf import write_tiny_llama
from corral.models.vram import KV_BYTES_PER_ELEMENT, estimate_vram_bytes, kv_bytes_per_token


def _reader_fields(path: Path) -> dict[str, object]:
    """Every key-value pair as GGUFReader sees it: scalars and strings by value, arrays as ArrayValue."""
    reader = gguf.GGUFReader(path)
    out: dict[str, object] = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):  # the reader's own entries for version and counts
            continue
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            out[key] = ArrayValue(int(field.types[1]), len(field.data))
        else:
            out[key] = field.contents()
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


@pytest.fixture(scope="module")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from corral.models.minilm_gguf import convert_minilm

    try:
        return convert_minilm(tmp_path_factory.mktemp("minilm") / "all-minilm-l6-v2.gguf")
    except RuntimeError as exc:  # the MiniLM source package is an optional test dependency
        pytest.skip(str(exc))


@pytest.mark.parametrize("model", ["tiny", "minilm"])
def test_header_fields_equal_what_gguf_reader_reads(model: str, request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue(model)
    header = read_gguf_header(path)
    reader = gguf.GGUFReader(path)

    assert header.fields == _reader_fields(path)
    assert header.version == reader.fields["GGUF.version"].contents()
    assert header.tensor_count == len(reader.tensors)
    assert header.kv_count == len(header.fields)


def test_a_file_cut_right_after_the_key_value_section_still_parses(tiny: Path, tmp_path: Path) -> None:
    whole = read_gguf_header(tiny)
    cut = tmp_path / "cut.gguf"
    with open(tiny, "rb") as src, open(cut, "wb") as dst:
        dst.write(src.read(whole.kv_end_offset))

    assert read_gguf_header(cut) == whole
    assert whole.kv_end_offset < tiny.stat().st_size // 10  # the tensor infos and data were never needed


def test_a_file_cut_inside_the_key_value_section_names_the_offset(tiny: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.gguf"
    with open(tiny, "rb") as src, open(cut, "wb") as dst:
        dst.write(src.read(40))

    with pytest.raises(GGUFHeaderError) as caught:
        read_gguf_header(cut)
    assert str(caught.value).startswith(f"{cut}: truncated GGUF header at byte ")


def test_a_file_that_is_not_gguf_is_refused_with_its_magic(tmp_path: Path) -> None:
    path = tmp_path / "x.gguf"
    path.write_bytes(b"PK\x03\x04" + bytes(60))

    with pytest.raises(GGUFHeaderError) as caught:
        read_gguf_header(path)
    assert str(caught.value) == f"{path}: not a GGUF file (magic b'PK\\x03\\x04', expected b'GGUF')"


def test_wanted_keys_stop_the_read_before_the_vocabulary(tiny: Path) -> None:
    header = read_gguf_header(tiny, ("general.architecture", "llama.block_count"))

    assert header.fields["llama.block_count"] == 2
    assert "tokenizer.ggml.tokens" not in header.fields
    assert header.kv_end_offset < read_gguf_header(tiny).kv_end_offset


def test_the_cache_rereads_a_file_replaced_in_place(tiny: Path, tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    shutil.copy(tiny, path)
    first = cached_gguf_header(path)
    write_tiny_llama(tmp_path / "f32.gguf", dtype="f32")
    os.replace(tmp_path / "f32.gguf", path)

    assert cached_gguf_header(path) is not first
    assert cached_gguf_header(path) is cached_gguf_header(path)


def test_vram_estimate_is_the_file_plus_f16_kv_cache_from_the_header(tiny: Path) -> None:
    # tiny llama: 2 layers, 2 KV heads of 16 dims (64 / 4 heads)
    per_token = 2 * 2 * 2 * 16 * KV_BYTES_PER_ELEMENT

    assert kv_bytes_per_token(read_gguf_header(tiny)) == per_token
    assert estimate_vram_bytes(tiny, 512) == tiny.stat().st_size + 512 * per_token


def test_vram_estimate_of_an_unreadable_gguf_is_its_size(tmp_path: Path) -> None:
    path = tmp_path / "broken.gguf"
    path.write_bytes(b"GGUF" + bytes(10))

    assert estimate_vram_bytes(path, 512) == 14


def test_a_current_minilm_gguf_is_recognised_from_its_header_and_kept(minilm: Path) -> None:
    from corral.models.minilm_gguf import convert_minilm

    mtime_ns = minilm.stat().st_mtime_ns
    convert_minilm(minilm)

    assert minilm.stat().st_mtime_ns == mtime_ns
