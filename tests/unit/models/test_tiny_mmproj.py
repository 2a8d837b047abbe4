"""The tiny vision projector: its GGUF, and llama.cpp's mtmd turning an image into tokens with it."""

from __future__ import annotations

import ctypes
import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gguf
import numpy as np
import pytest

if TYPE_CHECKING:
    from llama_cpp.mtmd_cpp import mtmd_context_params

from corral.models.tiny_gguf import write_tiny_llama
from corral.models.tiny_mmproj import IMAGE_SIZE, IMAGE_TOKENS, PATCH_SIZE, main, write_tiny_mmproj

# Imported here, not in the fixture: llama_cpp opens /dev/null at import, and an import inside a test
# turns that file's close at exit into an "Exception ignored ... ResourceWarning" under filterwarnings=error.
try:
    import llama_cpp
    import llama_cpp.mtmd_cpp as mtmd

    HAS_MTMD = True
except ImportError:  # the GGUF checks above still run without llama-cpp-python
    HAS_MTMD = False

PROMPT = "<|im_start|>user\n<__media__>\nwhat is this?<|im_end|>\n<|im_start|>assistant\n"


def _field(reader: gguf.GGUFReader, key: str) -> Any:
    field = reader.get_field(key)
    if field is None:
        raise KeyError(key)
    return field.contents()


def _png(width: int, height: int, pixel: Callable[[int, int], tuple[int, int, int]]) -> bytes:
    """An 8-bit RGB PNG, so the test needs no imaging library."""
    rows = b"".join(b"\0" + bytes(c for x in range(width) for c in pixel(x, y)) for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


RED = _png(20, 20, lambda x, y: (255, 0, 0))
GRADIENT = _png(40, 24, lambda x, y: (x * 6, y * 10, 128))


def test_tiny_mmproj_is_a_small_llava_style_clip_gguf(tmp_path: Path) -> None:
    path = write_tiny_mmproj(tmp_path / "mmproj.gguf")

    reader = gguf.GGUFReader(path)
    shapes = {t.name: tuple(int(n) for n in t.shape) for t in reader.tensors}  # ggml order: input dim first
    assert _field(reader, "general.architecture") == "clip"
    assert _field(reader, "clip.projector_type") == "mlp"
    assert _field(reader, "clip.has_vision_encoder") is True
    assert _field(reader, "clip.vision.image_size") == IMAGE_SIZE == 32
    assert _field(reader, "clip.vision.patch_size") == PATCH_SIZE == 8
    assert IMAGE_TOKENS == 16
    assert shapes["v.position_embd.weight"] == (32, IMAGE_TOKENS + 1)
    assert shapes["mm.2.weight"] == (64, 64)
    assert path.stat().st_size < 100_000


def test_the_projector_output_matches_the_text_embedding_size(tmp_path: Path) -> None:
    reader = gguf.GGUFReader(write_tiny_mmproj(tmp_path / "mmproj.gguf", text_embedding_dim=48))

    shapes = {t.name: tuple(int(n) for n in t.shape) for t in reader.tensors}
    assert shapes["mm.2.weight"] == (64, 48)
    assert shapes["mm.2.bias"] == (48,)
    with pytest.raises(ValueError, match="text_embedding_dim"):
        write_tiny_mmproj(tmp_path / "bad.gguf", text_embedding_dim=0)


def test_same_seed_writes_identical_bytes_and_rewriting_leaves_the_file_untouched(tmp_path: Path) -> None:
    path = write_tiny_mmproj(tmp_path / "a.gguf", seed=3)
    before = (path.stat().st_mtime_ns, path.stat().st_ino)

    assert write_tiny_mmproj(tmp_path / "b.gguf", seed=3).read_bytes() == path.read_bytes()
    assert write_tiny_mmproj(tmp_path / "c.gguf", seed=4).read_bytes() != path.read_bytes()
    write_tiny_mmproj(path, seed=3)
    assert (path.stat().st_mtime_ns, path.stat().st_ino) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.gguf", "b.gguf", "c.gguf"]


def test_command_line_writes_the_named_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "cli.gguf")]) == 0

    assert (tmp_path / "cli.gguf").is_file()
    assert "cli.gguf" in capsys.readouterr().out
    assert main([]) == 2


class _Vision:
    """The tiny llama with an mtmd context on the tiny projector, driven through llama.cpp's C API."""

    def __init__(self, model_path: Path, mmproj_path: Path) -> None:
        self.llm = llama_cpp.Llama(str(model_path), n_ctx=512, n_threads=1, n_threads_batch=1, verbose=False)
        self.ctx = mtmd.mtmd_init_from_file(str(mmproj_path).encode(), self.llm.model, _mtmd_params())
        assert self.ctx, "mtmd_init_from_file refused the tiny projector"

    def close(self) -> None:
        mtmd.mtmd_free(self.ctx)
        self.llm.close()

    def eval_prompt(self, image: bytes, text: str = PROMPT) -> tuple[list[tuple[int, int]], int, np.ndarray]:
        """Tokenize text + image, evaluate every chunk from position 0: (type, n_tokens) chunks, n_past, logits."""
        buffer = (ctypes.c_uint8 * len(image)).from_buffer(bytearray(image))
        bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(self.ctx, buffer, len(image), False)
        assert bitmap, "mtmd could not decode the PNG"
        chunks = mtmd.mtmd_input_chunks_init()
        try:
            encoded = text.encode()
            input_text = mtmd.mtmd_input_text()
            input_text.text, input_text.text_len = encoded, len(encoded)
            input_text.add_special, input_text.parse_special = True, True
            bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
            assert mtmd.mtmd_tokenize(self.ctx, chunks, ctypes.byref(input_text), bitmaps, 1) == 0
            found = []
            for i in range(mtmd.mtmd_input_chunks_size(chunks)):
                chunk = mtmd.mtmd_input_chunks_get(chunks, i)
                found.append(
                    (mtmd.mtmd_input_chunk_get_type(chunk), mtmd.mtmd_input_chunk_get_n_tokens(chunk))
                )

            llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self.llm.ctx), True)
            n_past = llama_cpp.llama_pos(0)
            status = mtmd.mtmd_helper_eval_chunks(
                self.ctx, self.llm.ctx, chunks, 0, 0, self.llm.n_batch, True, ctypes.byref(n_past)
            )
            assert status == 0
            logits = np.ctypeslib.as_array(
                llama_cpp.llama_get_logits_ith(self.llm.ctx, -1), shape=(self.llm.n_vocab(),)
            ).copy()
            return found, n_past.value, logits
        finally:
            mtmd.mtmd_input_chunks_free(chunks)
            mtmd.mtmd_bitmap_free(bitmap)


def _mtmd_params() -> mtmd_context_params:
    params: mtmd_context_params = mtmd.mtmd_context_params_default()
    params.use_gpu = False
    params.n_threads = 1  # one thread: spinning ggml workers on a busy 2-CPU box cost 100s of ms per eval
    params.print_timings = False
    return params


@pytest.fixture(scope="module")
def vision(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Vision]:
    if not HAS_MTMD:
        pytest.skip("llama-cpp-python with mtmd is not installed")
    folder = tmp_path_factory.mktemp("vision")
    loaded = _Vision(write_tiny_llama(folder / "tiny.gguf"), write_tiny_mmproj(folder / "mmproj.gguf"))
    yield loaded
    loaded.close()


def test_mtmd_turns_an_image_into_one_token_per_patch_between_the_text_chunks(vision: _Vision) -> None:
    text, image = mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT, mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE

    chunks, n_past, logits = vision.eval_prompt(GRADIENT)

    assert mtmd.mtmd_default_marker() == b"<__media__>"
    assert [kind for kind, _ in chunks] == [text, image, text]
    assert chunks[1][1] == IMAGE_TOKENS == (IMAGE_SIZE // PATCH_SIZE) ** 2
    assert n_past == sum(n for _, n in chunks)
    assert np.isfinite(logits).all()


def test_different_images_give_different_logits_and_the_same_image_the_same(vision: _Vision) -> None:
    _, _, red = vision.eval_prompt(RED)
    _, _, gradient = vision.eval_prompt(GRADIENT)
    _, _, red_again = vision.eval_prompt(RED)

    assert np.array_equal(red, red_again)
    assert np.abs(red - gradient).max() > 0.1


def test_a_projector_for_another_embedding_size_is_refused(vision: _Vision, tmp_path: Path) -> None:
    narrow = write_tiny_mmproj(tmp_path / "mmproj-32.gguf", text_embedding_dim=32)

    assert mtmd.mtmd_init_from_file(str(narrow).encode(), vision.llm.model, _mtmd_params()) is None
