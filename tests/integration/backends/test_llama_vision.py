"""The llama.cpp engine with a projector (llama_vision.py), in this process, on the generated tiny llama and its
generated projector (no small vision model is packaged): what loads, what a request's images may be, and that the
prompt cache never mistakes an image's positions for text."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.backends.engine import InvalidRequestError, LoadError
from corral.models.tiny_gguf import write_tiny_llama
from corral.models.tiny_mmproj import IMAGE_TOKENS, write_tiny_mmproj
from corral.proto import backend_pb2 as pb
from support.images import png

pytest.importorskip("llama_cpp")  # at import, not in a test: llama_cpp opens /dev/null when imported
from corral.backends.llama_cpp import LlamaCppEngine

RED = base64.b64encode(png(8, 8, (255, 0, 0))).decode()
BLUE = base64.b64encode(png(8, 8, (0, 0, 255))).decode()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("vision")
    write_tiny_llama(root / "tiny.gguf")
    write_tiny_mmproj(root / "proj.gguf")
    write_tiny_mmproj(root / "proj-32.gguf", text_embedding_dim=32)  # for another model's width
    (root / "junk.gguf").write_bytes(b"GGUF" + bytes(64))
    return root


def _engine(files: Path, projector: str = "proj.gguf") -> LlamaCppEngine:
    engine = LlamaCppEngine()
    engine.load(
        pb.ModelOptions(
            ModelFile=str(files / "tiny.gguf"),
            ContextSize=512,
            MMProj=str(files / projector) if projector else "",
        )
    )
    return engine


@pytest.fixture(scope="module")
def engine(files: Path) -> Iterator[LlamaCppEngine]:
    engine = _engine(files)
    yield engine
    engine.free()


def _ask(engine: LlamaCppEngine, images: list[str], prompt: str = "look <__media__> now") -> pb.Reply:
    return engine.predict(pb.PredictOptions(Prompt=prompt, Images=images, Tokens=4, Logprobs=1))


@pytest.mark.parametrize(
    ("projector", "words"),
    [
        ("proj-32.gguf", "mismatch between text model (n_embd = 64) and mmproj (n_embd = 32)"),
        ("junk.gguf", "could not load the projector"),
        ("missing.gguf", "does not exist"),
    ],
)
def test_a_projector_that_does_not_fit_fails_the_load_with_llama_cpps_reason(
    files: Path, projector: str, words: str
) -> None:
    with pytest.raises(LoadError, match="projector") as caught:
        _engine(files, projector)
    assert words in str(caught.value)


def test_images_are_evaluated_and_the_cache_never_reuses_an_images_positions(engine: LlamaCppEngine) -> None:
    red = _ask(engine, [RED])
    text = _ask(engine, [], "look  now")
    blue = _ask(
        engine, [BLUE]
    )  # the same text around another image: the image's positions are evaluated again
    assert red.prompt_tokens - text.prompt_tokens in (IMAGE_TOKENS - 1, IMAGE_TOKENS, IMAGE_TOKENS + 1)
    assert red.logprobs != blue.logprobs
    assert _ask(engine, [RED]).logprobs == red.logprobs


@pytest.mark.parametrize(
    ("images", "prompt", "words"),
    [
        (["!!"], "a <__media__> b", "Images[0] is not base64"),
        (["aGk="], "a <__media__> b", "Images[0] could not be decoded"),
        ([RED, RED], "a <__media__> b", "marks 1 images"),
        ([RED], "a <__media__>", "ends with an image"),
    ],
)
def test_bad_images_are_invalid_requests(
    engine: LlamaCppEngine, images: list[str], prompt: str, words: str
) -> None:
    with pytest.raises(InvalidRequestError, match=words.replace("[", r"\[").replace("]", r"\]")):
        _ask(engine, images, prompt)
    assert _ask(engine, [RED]).prompt_tokens > 0  # the engine still serves


def test_a_model_without_a_projector_refuses_images(files: Path) -> None:
    engine = _engine(files, "")
    try:
        with pytest.raises(InvalidRequestError, match="reads no images"):
            _ask(engine, [RED])
    finally:
        engine.free()
