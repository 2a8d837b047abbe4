"""The modality RPCs (AudioTranscription, TTS, GenerateImage) of a real backend process over gRPC: the simulator
serves them, a request's files must lie in the worker's staging directory, and an engine without a modality
says so by name."""

from __future__ import annotations

import wave
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from corral.models.tiny_gguf import write_tiny_llama
from corral.proto import backend_pb2 as pb
from support.backend_processes import Backend, load, rpc_error, running_backend

try:  # at import, not in a test: llama_cpp opens /dev/null when imported
    import llama_cpp  # noqa: F401

    HAS_LLAMA_CPP = True
except ImportError:  # pragma: no cover - the llama extra is not installed
    HAS_LLAMA_CPP = False

SENTENCE = "the quick brown fox jumps over the lazy dog"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("worker")
    (root / "models").mkdir()
    (root / "staging" / "ephemeral" / "audio" / "abcd1234").mkdir(parents=True)
    return root


@pytest.fixture(scope="module")
def simulator(root: Path) -> Iterator[Backend]:
    with running_backend("simulator", root, CORRAL_BACKEND_MODELS_ROOT=str(root / "models")) as backend:
        assert load(backend, "sim").success
        yield backend


def test_speech_written_by_tts_transcribes_back_to_its_words(simulator: Backend, root: Path) -> None:
    speech = root / "staging" / "localai-output-1.tmp"
    assert simulator.stub.TTS(pb.TTSRequest(text=SENTENCE, dst=str(speech)), timeout=30).success
    with wave.open(str(speech)) as audio:
        assert audio.getframerate() == 16000 and audio.getnframes() > 0
    result = simulator.stub.AudioTranscription(
        pb.TranscriptRequest(dst=str(speech), language="en"), timeout=30
    )
    assert result.text == SENTENCE and result.language == "en" and result.duration > 0
    assert [s.text for s in result.segments] == ["the quick brown fox jumps", "over the lazy dog"]
    assert result.segments[0].start == 0 and result.segments[-1].end == pytest.approx(
        result.duration * 1e9, rel=1e-3
    )


def test_an_image_is_written_where_asked(simulator: Backend, root: Path) -> None:
    out = root / "staging" / "localai-output-2.tmp"
    assert simulator.stub.GenerateImage(
        pb.GenerateImageRequest(positive_prompt="a cat", width=32, height=16, dst=str(out)), timeout=30
    ).success
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("where", ["models/x.wav", "elsewhere.wav", "staging/../models/y.wav"])
def test_a_file_outside_the_staging_directory_is_refused(simulator: Backend, root: Path, where: str) -> None:
    error = rpc_error(simulator.stub.TTS, pb.TTSRequest(text="hi", dst=str(root / where)))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED and "staging directory" in error.details()
    assert not (root / where).exists()


def test_a_symlink_out_of_the_staging_directory_is_refused(simulator: Backend, root: Path) -> None:
    link = root / "staging" / "ephemeral" / "audio" / "abcd1234" / "evil.wav"
    link.symlink_to(root / "models" / "model.gguf")
    error = rpc_error(simulator.stub.AudioTranscription, pb.TranscriptRequest(dst=str(link)))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED


@pytest.mark.skipif(not HAS_LLAMA_CPP, reason="needs llama-cpp-python")
def test_an_engine_without_a_modality_names_it(tmp_path: Path) -> None:
    model = write_tiny_llama(tmp_path / "tiny.gguf")
    with running_backend("llama-cpp", tmp_path) as backend:
        assert load(backend, "tiny", ModelFile=str(model), ContextSize=256).success
        error = rpc_error(backend.stub.AudioTranscription, pb.TranscriptRequest(dst=str(tmp_path / "a.wav")))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "llama-cpp backend does not implement AudioTranscription" in error.details()
