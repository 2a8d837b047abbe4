"""Every modality through `corral up` with two workers and its default models (issue 23's proof): a sentence
spoken by the TTS model (piper) and transcribed back by the Whisper model (faster-whisper), word error under a
bound; an image generated and returned as b64 and as a URL; a rerank whose order matches the cross-encoder run
alone; and the request files gone from both workers' ephemeral/ roots afterwards. The gallery backends come
installed (the session's own installs, which other tests prove); a newcomer's install on a first request is
what the 503-with-progress path below covers."""

from __future__ import annotations

import base64
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from corral.backends.llama_cpp import LlamaCppEngine
from corral.proto import backend_pb2 as pb
from support.audio_backends import word_error_rate
from support.cluster import free_port, free_stable_base
from support.processes import corral_up_ready

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]  # first requests install the speech/image backends

SENTENCE = "the quick brown fox jumps over the lazy dog"
WER_MAX = 0.2
QUERY = "which animal is quick"
DOCUMENTS = ["a lazy dog sleeps", "the quick brown fox", "stock markets fell", "a cat on a mat"]


@pytest.fixture(scope="module")
def stack(audio_backends_path: Path, diffusers_backends_path: Path) -> Iterator[tuple[str, Path]]:
    data_dir = Path(tempfile.mkdtemp(prefix="corral-up-media-", dir="/var/tmp"))
    os.chmod(data_dir, 0o755)
    for worker in (
        "worker-1",
        "worker-2",
    ):  # the session's installs (support/audio_backends.py, diffusers_backend.py)
        backends = (
            data_dir / worker / "backends"
        )  # where corral up's workers look: installed, not installed again
        backends.mkdir(parents=True)
        for installed in (
            audio_backends_path / "faster-whisper",
            audio_backends_path / "piper",
            diffusers_backends_path / "diffusers",
        ):
            (backends / installed.name).symlink_to(installed)
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "corral",
            "up",
            "--data-dir",
            str(data_dir),
            "--port",
            str(port),
            "--workers",
            "2",
            "--worker-base-port",
            str(free_stable_base()),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "LOCALAI_MODEL_LOAD_WAIT": "900s"},
    )  # a first request waits out its backend's install
    try:
        corral_up_ready(proc, 300.0)
        yield f"http://127.0.0.1:{port}", data_dir
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
        assert proc.stdout is not None
        proc.stdout.close()
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def client(stack: tuple[str, Path]) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{stack[0]}/v1", api_key="x", max_retries=0, timeout=900) as sdk:
        yield sdk


def _ephemeral_files(data_dir: Path) -> list[Path]:
    return [p for p in data_dir.rglob("ephemeral/*/*/*") if p.is_file()]


def test_every_default_model_lists_its_capability(client: openai.OpenAI) -> None:
    found = {m.id: (m.model_extra or {}).get("capabilities") for m in client.models.list()}
    assert found["gemma-3-270m"] == ["chat"] and found["all-minilm-l6-v2"] == ["embeddings"]
    assert found["tiny-reranker"] == ["rerank"]
    assert found["whisper-base"] == ["transcription"] and found["piper-joe"] == ["tts"]
    assert found["tiny-diffusion"] == ["image"]


def test_speech_from_piper_transcribes_back_through_whisper(
    client: openai.OpenAI, stack: tuple[str, Path]
) -> None:
    wav = client.audio.speech.create(
        model="piper-joe", input=SENTENCE, voice="", response_format="wav"
    ).content
    assert wav[:4] == b"RIFF" and len(wav) > 22050  # more than half a second of 22 kHz 16-bit audio
    heard = client.audio.transcriptions.create(
        model="whisper-base", file=("fox.wav", wav, "audio/wav"), language="en"
    )
    assert word_error_rate(SENTENCE, heard.text) <= WER_MAX, heard.text
    mp3 = client.audio.speech.create(
        model="piper-joe", input=SENTENCE, voice="", response_format="mp3"
    ).content
    again = client.audio.transcriptions.create(model="whisper-base", file=("fox.mp3", mp3, "audio/mpeg"))
    assert word_error_rate(SENTENCE, again.text) <= WER_MAX, again.text
    assert _ephemeral_files(stack[1]) == []


def test_a_rerank_orders_as_the_cross_encoder_alone(stack: tuple[str, Path]) -> None:
    base, data_dir = stack
    response = httpx.post(
        f"{base}/v1/rerank",
        json={"model": "tiny-reranker", "query": QUERY, "documents": DOCUMENTS},
        timeout=300,
    )
    assert response.status_code == 200, response.text
    through_corral = [(r["index"], r["relevance_score"]) for r in response.json()["results"]]
    engine = LlamaCppEngine()
    engine.load(
        pb.ModelOptions(
            ModelFile=str(next(data_dir.rglob("models/tiny-reranker.gguf"))),
            ContextSize=512,
            Reranking=True,
            Embeddings=True,
        )
    )
    try:
        alone = engine.rerank(pb.RerankRequest(query=QUERY, documents=DOCUMENTS))
    finally:
        engine.free()
    assert [index for index, _ in through_corral] == [r.index for r in alone.results]
    for (_, score), result in zip(through_corral, alone.results, strict=True):
        assert score == pytest.approx(result.relevance_score, abs=1e-4)


def test_an_image_comes_back_as_b64_and_as_a_url(client: openai.OpenAI, stack: tuple[str, Path]) -> None:
    # the first request waits LOCALAI_MODEL_LOAD_WAIT (60s) for the diffusers backend's install (torch: minutes),
    # then answers 503 with its progress and Retry-After, as a newcomer's client sees it: ask again until served
    deadline = time.monotonic() + 900
    while (
        first := httpx.post(
            f"{stack[0]}/v1/images/generations",
            timeout=300,
            json={
                "model": "tiny-diffusion",
                "prompt": "a red fox",
                "size": "64x64",
                "response_format": "b64_json",
                "seed": 3,
            },
        )
    ).status_code == 503 and time.monotonic() < deadline:
        assert "tiny-diffusion" in first.text and first.headers.get("retry-after"), first.text
        time.sleep(float(first.headers["retry-after"]))
    assert first.status_code == 200, first.text
    b64 = client.images.generate(
        model="tiny-diffusion",
        prompt="a red fox",
        size="64x64",
        response_format="b64_json",
        extra_body={"seed": 3},
    )
    png = base64.b64decode((b64.data or [])[0].b64_json or "")
    assert png == base64.b64decode(first.json()["data"][0]["b64_json"])  # the same seed, the same image
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    by_url = client.images.generate(
        model="tiny-diffusion", prompt="a red fox", size="64x64", extra_body={"seed": 3}
    )
    fetched = httpx.get((by_url.data or [])[0].url or "", timeout=60)
    assert fetched.status_code == 200 and fetched.content == png
