"""The modality endpoints through the whole stack on the simulator (frontend, two workers, backend processes):
speech in every format (streamed as the engine speaks for wav and pcm when it streams), transcription of that speech back to its words in every response format, images as
b64 and as URLs, the capability check, and the request files' life on the worker — staged below ephemeral/,
refused past the worker's budget before any inference, released after the call, also when the client goes
away mid-call. The real engines (piper, faster-whisper, diffusers) have their own tests."""

from __future__ import annotations

import base64
import io
import os
import struct
import threading
import wave
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from support.cluster import Cluster
from support.waiting import wait_for

pytestmark = pytest.mark.slow

SIM, SLOW, TIGHT, CHAT_ONLY = "media-sim", "media-slow", "media-tight", "chat-only"
STREAMING = "media-stream"  # the simulator streaming its speech (TTSStream), a word at a time
CHUNK_S = 0.25
SENTENCE = "the quick brown fox jumps over the lazy dog"


def _sim(models: Path, name: str, *lines: str) -> None:
    (models / f"{name}.yaml").write_text(
        "\n".join([f"name: {name}", "backend: simulator", "parameters:", f"  model: {name}", *lines]) + "\n"
    )


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = Cluster(root=state_root / "e2e-media", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    _sim(c.models_dir, SIM, "node_selector:", "  node.name: w1")
    _sim(c.models_dir, SLOW, "options:", '  - "media_time_s:10"', "node_selector:", "  node.name: w1")
    _sim(c.models_dir, TIGHT, "node_selector:", "  node.name: w2")
    _sim(
        c.models_dir,
        STREAMING,
        "options:",
        f'  - "speech_chunk_time_s:{CHUNK_S}"',
        "node_selector:",
        "  node.name: w1",
    )
    _sim(c.models_dir, CHAT_ONLY, "known_usecases: [chat]")
    try:
        c.start_frontend()
        c.start_worker("w1")
        c.start_worker("w2", "--ephemeral-staging-byte-limit", "2KiB")
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def client(cluster: Cluster) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=f"{cluster.frontend_url}/v1", api_key="unused", max_retries=0, timeout=120
    ) as sdk:
        yield sdk


def _ephemeral(cluster: Cluster, worker: str) -> list[Path]:
    """The files under the worker's ephemeral staging; os.walk skips a directory removed while it lists (the
    release this module waits for), where Path.rglob raises FileNotFoundError."""
    root = cluster.root / worker / "staging" / "ephemeral"
    return sorted(Path(d) / f for d, _, files in os.walk(root) for f in files)


def _speech(client: openai.OpenAI, fmt: str = "wav", model: str = SIM, text: str = SENTENCE) -> bytes:
    return client.audio.speech.create(model=model, input=text, voice="default", response_format=fmt).content  # type: ignore[arg-type]


def _transcribe(
    cluster: Cluster, audio: bytes, model: str = SIM, path: str = "transcriptions", **fields: str
) -> httpx.Response:
    return httpx.post(
        f"{cluster.frontend_url}/v1/audio/{path}",
        files={"file": ("speech.wav", audio, "audio/wav")},
        data={"model": model, **fields},
        timeout=120,
    )


def test_speech_comes_in_every_format_and_transcribes_back_to_its_words(
    cluster: Cluster, client: openai.OpenAI
) -> None:
    wav = _speech(client)
    with wave.open(io.BytesIO(wav)) as audio:
        assert audio.getframerate() == 16000 and audio.getnframes() > 16000
    assert _speech(client, "mp3")[:2] in (b"\xff\xf3", b"\xff\xfb", b"ID")
    assert _speech(client, "flac")[:4] == b"fLaC" and _speech(client, "opus")[:4] == b"OggS"
    assert len(_speech(client, "pcm")) == pytest.approx(len(wav) * 24 / 16, rel=0.05)
    text = client.audio.transcriptions.create(model=SIM, file=("speech.wav", wav, "audio/wav"))
    assert text.text == SENTENCE
    assert _ephemeral(cluster, "w1") == []  # the upload and the speech file were released


def test_transcription_response_formats(cluster: Cluster, client: openai.OpenAI) -> None:
    wav = _speech(client)
    verbose = _transcribe(cluster, wav, response_format="verbose_json", language="en").json()
    assert verbose["task"] == "transcribe" and verbose["language"] == "en" and verbose["text"] == SENTENCE
    assert [s["text"] for s in verbose["segments"]] == ["the quick brown fox jumps", "over the lazy dog"]
    assert verbose["segments"][-1]["end"] == pytest.approx(verbose["duration"], abs=0.01)
    srt = _transcribe(cluster, wav, response_format="srt").text
    assert srt.startswith("1\n00:00:00,000 --> 00:00:0") and "\n2\n" in srt and "over the lazy dog" in srt
    vtt = _transcribe(cluster, wav, response_format="vtt").text
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> ")
    assert _transcribe(cluster, wav, response_format="text").text == SENTENCE
    translated = _transcribe(cluster, wav, path="translations", response_format="verbose_json").json()
    assert translated["task"] == "translate"


@pytest.mark.parametrize(
    ("fields", "param", "code"),
    [
        ({"response_format": "xml"}, "response_format", "invalid_value"),
        ({"temperature": "hot"}, "temperature", "invalid_value"),
        ({"language": "english!"}, "language", "invalid_value"),
        ({"timestamp_granularities[]": "word"}, "timestamp_granularities[]", "unsupported_parameter"),
        ({"tempo": "1"}, "tempo", "unknown_parameter"),
    ],
)
def test_bad_transcription_fields_are_refused_by_name(
    cluster: Cluster, client: openai.OpenAI, fields: dict[str, str], param: str, code: str
) -> None:
    response = _transcribe(cluster, b"RIFF0000WAVE", **fields)
    assert response.status_code == 400, response.text
    assert (response.json()["error"]["param"], response.json()["error"]["code"]) == (param, code)


def test_images_as_b64_and_as_urls(cluster: Cluster, client: openai.OpenAI) -> None:
    result = client.images.generate(
        model=SIM, prompt="a red fox", size="64x64", n=2, response_format="b64_json", extra_body={"seed": 7}
    )
    first, second = (base64.b64decode(item.b64_json or "") for item in result.data or [])
    assert first[:8] == b"\x89PNG\r\n\x1a\n" and first != second  # seed 7 and 8
    again = client.images.generate(
        model=SIM, prompt="a red fox", size="64x64", response_format="b64_json", extra_body={"seed": 7}
    )
    assert base64.b64decode((again.data or [])[0].b64_json or "") == first
    by_url = client.images.generate(model=SIM, prompt="a red fox", size="64x64", extra_body={"seed": 7})
    url = (by_url.data or [])[0].url or ""
    assert url.startswith(cluster.frontend_url + "/generated-images/")
    fetched = httpx.get(url, timeout=30)
    assert (
        fetched.status_code == 200
        and fetched.headers["content-type"] == "image/png"
        and fetched.content == first
    )
    assert httpx.get(url.replace("/generated-images/", "/generated-images/x"), timeout=30).status_code == 404
    assert _ephemeral(cluster, "w1") == []


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"size": "100x100"}, "size"),
        ({"size": "4096x4096"}, "size"),
        ({"n": 11}, "n"),
        ({"style": "vivid"}, "style"),
        ({"quality": "hd"}, "quality"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_image_requests_are_refused_by_name(cluster: Cluster, body: dict[str, Any], param: str) -> None:
    response = httpx.post(
        f"{cluster.frontend_url}/v1/images/generations",
        json={"model": SIM, "prompt": "x", **body},
        timeout=30,
    )
    assert response.status_code == 400 and response.json()["error"]["param"] == param, response.text


def test_a_model_without_the_capability_is_refused_naming_it(cluster: Cluster, client: openai.OpenAI) -> None:
    response = httpx.post(
        f"{cluster.frontend_url}/v1/audio/speech", json={"model": CHAT_ONLY, "input": "hi"}, timeout=30
    )
    error = response.json()["error"]
    assert (response.status_code, error["code"], error["param"]) == (400, "model_not_capable", "model")
    assert CHAT_ONLY in error["message"] and "tts" in error["message"] and "chat" in error["message"]
    models = {m.id: m.model_extra or {} for m in client.models.list()}
    assert models[CHAT_ONLY]["capabilities"] == ["chat"]
    assert models[SIM]["capabilities"] == ["chat", "embeddings", "transcription", "tts", "image"]


def test_an_input_past_the_workers_budget_is_refused_before_inference(
    cluster: Cluster, client: openai.OpenAI
) -> None:
    wav = _speech(client)  # ~80 KB: the tight worker holds 2 KiB of inputs
    response = _transcribe(cluster, wav, model=TIGHT)
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert (
        error["code"] == "input_storage_full" and "LOCALAI_EPHEMERAL_STAGING_BYTE_LIMIT" in error["message"]
    )
    assert response.headers["retry-after"]
    assert _ephemeral(cluster, "w2") == []
    log = (cluster.root / "logs").glob("w2*.log")
    assert not any("AudioTranscription" in p.read_text() and "dst=" in p.read_text() for p in log)
    assert (
        _transcribe(cluster, b"RIFF" + bytes(100), model=TIGHT).status_code == 400
    )  # small enough: staged, then
    # refused by the engine for what it is (not a WAV), and released
    assert _ephemeral(cluster, "w2") == []


def test_a_client_that_goes_away_mid_call_leaves_no_input_behind(
    cluster: Cluster, client: openai.OpenAI
) -> None:
    wav = _speech(client)
    client.chat.completions.create(
        model=SLOW, messages=[{"role": "user", "content": "hi"}]
    )  # loaded: no cold start
    outcome: list[BaseException] = []

    def hang_up_after_2s() -> None:
        try:
            with httpx.Client(timeout=2.0) as short:  # the backend (media_time_s:10) is still working then
                short.post(
                    f"{cluster.frontend_url}/v1/audio/transcriptions",
                    data={"model": SLOW},
                    files={"file": ("speech.wav", wav, "audio/wav")},
                )
        except httpx.TimeoutException as exc:
            outcome.append(exc)

    caller = threading.Thread(target=hang_up_after_2s)
    caller.start()
    wait_for(lambda: _ephemeral(cluster, "w1") != [], timeout_s=30, what="the upload staged on w1")
    caller.join(30)
    assert outcome, "the client was expected to give up before the slow backend answered"
    # released by the disconnect, well before the backend's own 10 s call would end and release it
    wait_for(lambda: _ephemeral(cluster, "w1") == [], timeout_s=6, what="the gone client's upload released")


def _streamed(cluster: Cluster, fmt: str, model: str = STREAMING) -> tuple[httpx.Response, list[bytes]]:
    """The answer to a speech request and its body as the reads that received it."""
    with httpx.stream(
        "POST",
        f"{cluster.frontend_url}/v1/audio/speech",
        timeout=120,
        json={"model": model, "input": SENTENCE, "voice": "default", "response_format": fmt},
    ) as answer:
        return answer, [read for read in answer.iter_raw() if read]


def _wav_frames(wav: bytes) -> tuple[int, bytes]:
    with wave.open(io.BytesIO(wav)) as audio:
        return audio.getframerate(), audio.readframes(audio.getnframes())


def test_wav_speech_streams_as_the_engine_speaks_and_equals_the_whole_file(
    cluster: Cluster, client: openai.OpenAI
) -> None:
    _streamed(cluster, "wav")  # loaded: what follows is the stream, not the cold start
    answer, reads = _streamed(cluster, "wav")
    body = b"".join(reads)
    assert answer.status_code == 200 and answer.headers["content-type"] == "audio/wav"
    assert answer.headers.get("transfer-encoding") == "chunked" and "content-length" not in answer.headers
    # the first word's audio was read while the engine still spoke the other eight (CHUNK_S before each)
    assert len(reads) > 1 and len(reads[0]) < len(body)
    assert body[:4] == b"RIFF" and body[4:8] == body[40:44] == b"\xff\xff\xff\xff"  # sizes unknown when sent
    patched = (
        body[:4]
        + struct.pack("<I", len(body) - 8)
        + body[8:40]
        + struct.pack("<I", len(body) - 44)
        + body[44:]
    )
    assert _wav_frames(patched) == _wav_frames(
        _speech(client)
    )  # the same audio as the simulator's whole file


def test_pcm_speech_streams_at_24_khz_as_long_as_the_whole_file(
    cluster: Cluster, client: openai.OpenAI
) -> None:
    answer, reads = _streamed(cluster, "pcm")
    assert answer.status_code == 200 and answer.headers["content-type"] == "audio/pcm" and len(reads) > 1
    assert len(b"".join(reads)) == len(_speech(client, "pcm"))  # 16 kHz tones resampled chunk by chunk


def test_speech_from_a_backend_that_does_not_stream_comes_whole(
    cluster: Cluster, client: openai.OpenAI
) -> None:
    answer, reads = _streamed(cluster, "wav", SIM)  # the simulator without speech_chunk_time_s: no TTSStream
    wav = b"".join(reads)
    assert answer.status_code == 200 and answer.headers["content-length"] == str(len(wav))
    assert struct.unpack("<I", wav[4:8])[0] == len(wav) - 8 and b"ICMT" in wav  # the file the backend wrote
    assert _speech(client, "mp3", model=STREAMING)[:2] in (
        b"\xff\xf3",
        b"\xff\xfb",
        b"ID",
    )  # not streamed: whole
    assert _ephemeral(cluster, "w1") == []


def test_a_client_that_leaves_a_speech_stream_stops_the_engine(cluster: Cluster) -> None:
    _streamed(cluster, "wav")
    log = next((cluster.root / "logs").glob("w1*.log"))
    before = log.read_text().count("TTSStream cancelled by the caller")
    with httpx.stream(
        "POST",
        f"{cluster.frontend_url}/v1/audio/speech",
        timeout=120,
        json={"model": STREAMING, "input": SENTENCE, "response_format": "wav"},
    ) as answer:
        next(answer.iter_raw())  # the first word, then hang up
    wait_for(
        lambda: log.read_text().count("TTSStream cancelled by the caller") > before,
        timeout_s=30,
        what="w1's backend to log the stream cancelled by the gone client",
    )
