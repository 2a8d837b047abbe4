"""Images in llama-cpp prompts: the model's projector (`MMProj`) through llama.cpp's multimodal library (mtmd).

A model config's `mmproj:` file is loaded beside the model (`ModelOptions.MMProj`). A request's images arrive
base64 in `PredictOptions.Images`, in order, each marked in the rendered prompt by `<__media__>` (mtmd's
default marker, which the frontend writes in place of each image part). mtmd splits the prompt into text and
image chunks; text chunks are evaluated like any prompt, image chunks by the projector straight into the
context. The prompt's token list then holds -1 for each image position, so the token loop's prefix match
reuses exactly what was evaluated, and a later prompt never matches an image's positions.

A model without a projector refuses images (the frontend checks first: its config has no `mmproj`).
"""

from __future__ import annotations

import base64
import binascii
import ctypes
import logging
from pathlib import Path
from types import ModuleType

import llama_cpp
from llama_cpp import Llama

from corral.backends.engine import ContextLengthError, InvalidRequestError, LoadError
from corral.backends.llama_log import route_mtmd_log

log = logging.getLogger(__name__)

IMAGE_POSITION = -1  # the prompt token list's entry for a position an image filled (no real token id)


def _mtmd() -> ModuleType:  # imported on first use: text-only models never load libmtmd
    import llama_cpp.mtmd_cpp as mtmd_cpp

    route_mtmd_log(mtmd_cpp)
    return mtmd_cpp


class VisionProjector:
    """The mtmd context of one loaded model and its projector file."""

    def __init__(self, llm: Llama, path: Path, *, use_gpu: bool) -> None:
        mtmd = _mtmd()
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.print_timings = False
        params.n_threads = llm.n_threads
        params.warmup = False
        self._mtmd = mtmd
        self._ctx = mtmd.mtmd_init_from_file(str(path).encode(), llm.model, params)
        if (
            not self._ctx
        ):  # load_projector's caller appends llama.cpp's own reason (a size mismatch, a bad file)
            raise LoadError(
                f"llama.cpp could not load the projector {path} (mmproj) for this model (a projector "
                "is built for one model)"
            )
        if not mtmd.mtmd_support_vision(self._ctx):
            self.close()
            raise LoadError(f"the projector {path} (mmproj) has no vision encoder")
        self.marker = mtmd.mtmd_default_marker().decode("utf-8")

    def close(self) -> None:
        if self._ctx:
            self._mtmd.mtmd_free(self._ctx)
            self._ctx = None

    def evaluate(self, llm: Llama, text: str, add_special: bool, images: list[str]) -> list[int]:
        """Evaluate the prompt `text` with `images` (base64) in the context from position 0; return its token list
        (-1 where an image is), which the token loop's prefix match then reuses whole but for its last token."""
        markers = text.count(self.marker)
        if markers != len(images):
            raise InvalidRequestError(
                f"the prompt marks {markers} images ({self.marker}) but the request carries "
                f"{len(images)} (PredictOptions.Images); send one marker per image"
            )
        bitmaps = [self._bitmap(i, image) for i, image in enumerate(images)]
        chunks = self._mtmd.mtmd_input_chunks_init()
        try:
            self._tokenize(chunks, text, add_special, bitmaps)
            return self._eval_chunks(llm, chunks)
        finally:
            self._mtmd.mtmd_input_chunks_free(chunks)
            for bitmap in bitmaps:
                self._mtmd.mtmd_bitmap_free(bitmap)

    def _bitmap(self, index: int, image: str) -> ctypes.c_void_p:
        try:
            data = base64.b64decode(image, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidRequestError(f"Images[{index}] is not base64") from None
        buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        bitmap = self._mtmd.mtmd_helper_bitmap_init_from_buf(self._ctx, buffer, len(data), False)
        if not bitmap:
            raise InvalidRequestError(
                f"Images[{index}] could not be decoded as an image (PNG, JPEG, GIF or BMP)"
            )
        return bitmap  # type: ignore[no-any-return]

    def _tokenize(
        self, chunks: ctypes.c_void_p, text: str, add_special: bool, bitmaps: list[ctypes.c_void_p]
    ) -> None:
        encoded = text.encode("utf-8")
        input_text = self._mtmd.mtmd_input_text()
        input_text.text = encoded
        input_text.text_len = len(encoded)
        input_text.add_special = add_special
        input_text.parse_special = True
        array = (self._mtmd.mtmd_bitmap_p_ctypes * len(bitmaps))(*bitmaps)
        status = self._mtmd.mtmd_tokenize(self._ctx, chunks, ctypes.byref(input_text), array, len(bitmaps))
        if status != 0:
            raise InvalidRequestError(
                f"llama.cpp could not split the prompt into text and images (mtmd_tokenize returned {status})"
            )

    def _eval_chunks(self, llm: Llama, chunks: ctypes.c_void_p) -> list[int]:
        mtmd = self._mtmd
        llm.reset()
        n_chunks = mtmd.mtmd_input_chunks_size(chunks)
        last = mtmd.mtmd_input_chunks_get(chunks, n_chunks - 1) if n_chunks else None
        if last is None or mtmd.mtmd_input_chunk_get_type(last) != mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
            raise InvalidRequestError(
                "the prompt ends with an image; text must follow the last image (a chat "
                "template's assistant turn does)"
            )
        total = sum(
            mtmd.mtmd_input_chunk_get_n_tokens(mtmd.mtmd_input_chunks_get(chunks, i)) for i in range(n_chunks)
        )
        if total >= llm.n_ctx():
            raise ContextLengthError(
                f"the prompt is {total} tokens with its images but this model's context window is "
                f"{llm.n_ctx()} tokens; shorten the messages, send fewer or smaller images"
            )
        for i in range(n_chunks):
            chunk = mtmd.mtmd_input_chunks_get(chunks, i)
            if mtmd.mtmd_input_chunk_get_type(chunk) == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
                n = ctypes.c_size_t()
                pointer = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                llm.eval([pointer[j] for j in range(n.value)])
                continue
            start = llm.n_tokens
            new_n_past = llama_cpp.llama_pos(0)
            status = mtmd.mtmd_helper_eval_chunk_single(
                self._ctx,
                llm._ctx.ctx,
                chunk,
                llama_cpp.llama_pos(start),
                llama_cpp.llama_seq_id(0),
                llm.n_batch,
                False,
                ctypes.byref(new_n_past),
            )
            if status != 0:
                raise InvalidRequestError(f"llama.cpp could not evaluate image chunk {i} (status {status})")
            llm.input_ids[start : new_n_past.value] = IMAGE_POSITION
            llm.n_tokens = new_n_past.value
        return llm.input_ids[: llm.n_tokens].tolist()  # type: ignore[no-any-return]


def load_projector(llm: Llama, path_text: str, *, use_gpu: bool) -> VisionProjector | None:
    """The model's projector if its options name one (`MMProj`), else None."""
    if not path_text:
        return None
    path = Path(path_text)
    if not path.is_file():
        raise LoadError(f"the projector file {path} (MMProj) does not exist")
    projector = VisionProjector(llm, path, use_gpu=use_gpu)
    log.info("llama.cpp loaded projector %s: images are read", path)
    return projector
