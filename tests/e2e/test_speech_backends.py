"""Speech end to end on real engines: the `piper` and `faster-whisper` gallery backends, installed through corral's
gallery (own venvs) and started by the worker's supervisor as a worker starts them (run.sh, bearer token, models
root), serve the packaged Piper voice joe and Whisper base. Piper speaks a sentence into the worker's staging
directory and Whisper transcribes it back: the words must match (word error rate), not only the status. The last
test does the same through a frontend and a worker on /v1/audio/speech and /v1/audio/transcriptions."""

from __future__ import annotations

import collections
import io
import json
import shutil
import subprocess
import time
import wave
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import httpx
import pytest
import yaml

from corral.gallery.registry import BackendRegistry
from corral.loading.attempt import model_options
from corral.models import audio
from corral.models.config import parse_model_config
from corral.proto import backend_pb2 as pb
from corral.proto import backend_pb2_grpc
from corral.worker.ports import PortAllocator
from corral.worker.supervisor import Supervisor
from support import audio_backends
from support.audio_backends import word_error_rate
from support.cluster import Cluster, free_port
from support.waiting import wait_for_async

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # the session builds both venvs first

TOKEN = "speech-test-token"
AUTH = (("authorization", f"Bearer {TOKEN}"),)
SENTENCE = "the quick brown fox jumps over the lazy dog"
WER_MAX = 0.2
CALL_TIMEOUT_S = 120


@dataclass
class Speech:
    tts: backend_pb2_grpc.BackendStub
    stt: backend_pb2_grpc.BackendStub
    stt_identity: str
    staging: Path  # the worker's staging directory: <models>/../staging
    models: Path
    fox: Path  # piper's WAV of SENTENCE, made once
    timings: dict[str, float]
    stt_log: collections.deque[
        str
    ]  # the faster-whisper process's last stderr lines, as the worker keeps them


def test_word_error_rate_counts_substitutions_insertions_and_deletions() -> None:
    assert word_error_rate("the quick brown fox", "The quick, brown fox.") == 0
    assert word_error_rate("the quick brown fox", "the quick fox dumps") == 0.5  # one deleted, one inserted
    assert word_error_rate("a b c d", "a x c d") == 0.25


@pytest.fixture(scope="module")
async def speech(state_root: Path, audio_backends_path: Path) -> AsyncIterator[Speech]:
    root = state_root / "speech"
    models, staging = root / "models", root / "staging"
    models.mkdir(parents=True, exist_ok=True)
    (staging / "ephemeral").mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    whisper_yaml, piper_yaml = audio.prepare_whisper(models), audio.prepare_piper_voice(models)
    timings["prepare models"] = time.perf_counter() - started
    base = free_port()
    supervisor = Supervisor(
        PortAllocator(base, base + 10),
        bind_host="127.0.0.1",
        token=TOKEN,
        start_timeout_s=60,
        models_root=models,
        registry=BackendRegistry(audio_backends_path, None, None),
    )
    channels: list[grpc.aio.Channel] = []
    try:
        stubs, identities, logs = {}, {}, {}
        for name, yaml_path in ((audio_backends.PIPER, piper_yaml), (audio_backends.WHISPER, whisper_yaml)):
            cfg = parse_model_config(yaml.safe_load(yaml_path.read_text()), yaml_path, models)
            assert cfg.backend == name
            identities[name] = cfg.model  # what a frontend sends as ModelIdentity, and loads as Model
            started = time.perf_counter()
            process = await supervisor.ensure(f"{cfg.name}#0", name)
            logs[name] = process.stderr_tail
            channels.append(grpc.aio.insecure_channel(process.local_address))
            stub = stubs[name] = backend_pb2_grpc.BackendStub(channels[-1])
            result = await stub.LoadModel(model_options(cfg), metadata=AUTH, timeout=CALL_TIMEOUT_S)
            assert result.success, result.message
            timings[f"{name} start + load"] = time.perf_counter() - started
        fox = staging / "ephemeral" / "speech" / "fox.wav"
        fox.parent.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        await stubs[audio_backends.PIPER].TTS(
            pb.TTSRequest(text=SENTENCE, dst=str(fox), ModelIdentity=identities[audio_backends.PIPER]),
            metadata=AUTH,
            timeout=CALL_TIMEOUT_S,
        )
        timings["piper TTS"] = time.perf_counter() - started
        yield Speech(
            stubs[audio_backends.PIPER],
            stubs[audio_backends.WHISPER],
            identities[audio_backends.WHISPER],
            staging,
            models,
            fox,
            timings,
            logs[audio_backends.WHISPER],
        )
    finally:
        for channel in channels:
            await channel.close()
        await supervisor.stop_all(force=True)
        print("\nspeech timings (s): " + ", ".join(f"{k} {v:.2f}" for k, v in timings.items()))


def _wav_seconds(path: Path) -> tuple[float, int, int, int]:
    with wave.open(str(path), "rb") as wav:
        return (
            wav.getnframes() / wav.getframerate(),
            wav.getframerate(),
            wav.getnchannels(),
            wav.getsampwidth(),
        )


def _transcribe(speech: Speech, path: Path, **fields: Any) -> pb.TranscriptResult:
    request = pb.TranscriptRequest(**{"dst": str(path), "ModelIdentity": speech.stt_identity, **fields})
    result: pb.TranscriptResult = speech.stt.AudioTranscription(
        request, metadata=AUTH, timeout=CALL_TIMEOUT_S
    )
    return result


async def _refusal(call) -> tuple[grpc.StatusCode, str]:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value.code(), caught.value.details() or ""


async def test_piper_speech_is_transcribed_back_by_whisper(speech: Speech) -> None:
    seconds, rate, channels, width = _wav_seconds(speech.fox)
    assert (rate, channels, width) == (22050, 1, 2) and 1.5 < seconds < 5.0
    started = time.perf_counter()
    result = await _transcribe(speech, speech.fox)
    speech.timings["whisper transcription"] = time.perf_counter() - started
    assert word_error_rate(SENTENCE, result.text) <= WER_MAX, result.text
    assert result.language == "en" and abs(result.duration - seconds) < 0.05
    assert result.segments and result.text == " ".join(s.text for s in result.segments)
    ends_ns = [0] + [s.end for s in result.segments]
    for segment, previous_end in zip(result.segments, ends_ns, strict=False):
        assert previous_end <= segment.start < segment.end <= round(seconds * 1e9) + 20_000_000  # nanoseconds
        assert segment.tokens
    assert [s.id for s in result.segments] == list(range(len(result.segments)))


async def test_translate_language_prompt_and_temperature_are_honoured(speech: Speech) -> None:
    translated = await _transcribe(
        speech, speech.fox, translate=True
    )  # Whisper's translate task: into English
    assert word_error_rate(SENTENCE, translated.text) <= WER_MAX, translated.text
    told = await _transcribe(speech, speech.fox, language="en", prompt="Quick Brown Fox.", temperature=0.2)
    assert told.language == "en" and word_error_rate(SENTENCE, told.text) <= WER_MAX, told.text
    code, details = await _refusal(_transcribe(speech, speech.fox, language="xx"))
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "TranscriptRequest.language 'xx'" in details
    code, details = await _refusal(_transcribe(speech, speech.fox, temperature=1.5))
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "temperature 1.5 must be between 0 and 1" in details


async def test_other_audio_formats_decode_through_pyav(speech: Speech, audio_backends_path: Path) -> None:
    """The WAV re-encoded as OGG/Opus and FLAC by the backend venv's own PyAV: the same words come back."""
    python = audio_backends_path / audio_backends.WHISPER / "venv" / "bin" / "python"
    for suffix, codec in ((".ogg", "libopus"), (".flac", "flac")):
        target = speech.fox.with_suffix(suffix)
        script = (
            "import av, sys\n"
            "with av.open(sys.argv[1]) as src, av.open(sys.argv[2], 'w') as dst:\n"
            "    out = dst.add_stream(sys.argv[3], rate=48000 if sys.argv[3] == 'libopus' else 22050)\n"
            "    for frame in src.decode(audio=0):\n"
            "        frame.pts = None\n"
            "        for packet in out.encode(frame): dst.mux(packet)\n"
            "    for packet in out.encode(None): dst.mux(packet)\n"
        )
        subprocess.run(
            [str(python), "-c", script, str(speech.fox), str(target), codec], check=True, timeout=60
        )
        result = await _transcribe(speech, target)
        assert word_error_rate(SENTENCE, result.text) <= WER_MAX, (suffix, result.text)


async def test_files_outside_the_staging_directory_are_refused(speech: Speech, tmp_path: Path) -> None:
    outside = tmp_path / "fox.wav"
    shutil.copy(speech.fox, outside)
    code, details = await _refusal(_transcribe(speech, outside))
    assert code is grpc.StatusCode.PERMISSION_DENIED
    assert f"TranscriptRequest.dst '{outside}' is outside this worker's staging directory" in details
    link = speech.staging / "ephemeral" / "speech" / "link.wav"  # inside by name, outside once resolved
    link.unlink(missing_ok=True)
    link.symlink_to(outside)
    code, _ = await _refusal(_transcribe(speech, link))
    assert code is grpc.StatusCode.PERMISSION_DENIED
    into_models = speech.models / "spoken.wav"
    code, details = await _refusal(
        speech.tts.TTS(
            pb.TTSRequest(text="hello", dst=str(into_models)), metadata=AUTH, timeout=CALL_TIMEOUT_S
        )
    )
    assert (
        code is grpc.StatusCode.PERMISSION_DENIED and "TTSRequest.dst" in details and not into_models.exists()
    )


@pytest.mark.parametrize(
    "name, content, reason",
    [
        ("notes.txt", b"these are words, not sound\n", "Invalid data found when processing input"),
        ("empty.wav", b"", "Invalid data found when processing input"),
        # a PNG signature and header: FFmpeg reads it as an image, a container without an audio stream
        (
            "picture.png",
            bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"),
            "it holds no audio stream",
        ),
    ],
)
async def test_a_file_that_is_not_audio_is_invalid_argument(
    speech: Speech, name: str, content: bytes, reason: str
) -> None:
    path = speech.staging / "ephemeral" / "speech" / name
    path.write_bytes(content)
    code, details = await _refusal(_transcribe(speech, path))
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith(
        f"TranscriptRequest.dst {name!r} is not audio this backend can decode: {reason}"
    )


async def test_speed_voice_and_identity(speech: Speech) -> None:
    base_s = _wav_seconds(speech.fox)[0]
    # length_scale = 1/speed scales the phonemes' durations; the pauses around the sentence scale less (2x: 0.64)
    for speed, low, high in ((2.0, 0.45, 0.8), (0.5, 1.5, 2.5)):
        path = speech.fox.with_name(f"fox-{speed:g}.wav")
        await speech.tts.TTS(
            pb.TTSRequest(text=SENTENCE, dst=str(path), speed=speed, voice="en_US-joe-medium"),
            metadata=AUTH,
            timeout=CALL_TIMEOUT_S,
        )
        assert low < _wav_seconds(path)[0] / base_s < high, speed
    code, details = await _refusal(
        speech.tts.TTS(
            pb.TTSRequest(text=SENTENCE, dst=str(speech.fox), voice="alloy"),
            metadata=AUTH,
            timeout=CALL_TIMEOUT_S,
        )
    )
    assert code is grpc.StatusCode.INVALID_ARGUMENT and details.startswith(
        "TTSRequest.voice 'alloy' is not served"
    )
    code, details = await _refusal(
        speech.tts.TTS(
            pb.TTSRequest(text=SENTENCE, dst=str(speech.fox), speed=5), metadata=AUTH, timeout=CALL_TIMEOUT_S
        )
    )
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "speed 5 must be between 0.25 and 4" in details
    english = speech.fox.with_name("fox-en.wav")
    await speech.tts.TTS(
        pb.TTSRequest(text=SENTENCE, dst=str(english), language="en-US"),
        metadata=AUTH,
        timeout=CALL_TIMEOUT_S,
    )
    assert english.is_file()
    code, details = await _refusal(
        speech.tts.TTS(
            pb.TTSRequest(text=SENTENCE, dst=str(english), language="de"),
            metadata=AUTH,
            timeout=CALL_TIMEOUT_S,
        )
    )
    assert (
        code is grpc.StatusCode.INVALID_ARGUMENT
        and details == "TTSRequest.language 'de': this voice speaks 'en-us'"
    )
    code, details = await _refusal(_transcribe(speech, speech.fox, ModelIdentity="another-model"))
    assert code is grpc.StatusCode.NOT_FOUND and "model identity mismatch" in details


async def test_speech_streams_a_sentence_per_reply_and_refuses_like_tts(speech: Speech) -> None:
    text = "The quick brown fox jumps over the lazy dog. It was not amused."
    replies = [
        r async for r in speech.tts.TTSStream(pb.TTSRequest(text=text), metadata=AUTH, timeout=CALL_TIMEOUT_S)
    ]
    assert len(replies) == 2 and json.loads(replies[0].message) == {"sample_rate": 22050}
    assert [r.message for r in replies[1:]] == [b""] and all(
        len(r.audio) % 2 == 0 and r.audio for r in replies
    )
    streamed = speech.fox.with_name("streamed.wav")
    with wave.open(str(streamed), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(22050)
        out.writeframes(b"".join(r.audio for r in replies))
    assert word_error_rate(text, (await _transcribe(speech, streamed)).text) <= WER_MAX
    code, details = await _refusal(
        _stream_all(
            speech.tts.TTSStream(
                pb.TTSRequest(text="hi", voice="alloy"), metadata=AUTH, timeout=CALL_TIMEOUT_S
            )
        )
    )
    assert code is grpc.StatusCode.INVALID_ARGUMENT and details.startswith("TTSRequest.voice 'alloy'")
    code, details = await _refusal(_stream_all(speech.tts.TTSStream(pb.TTSRequest(text="hi"), timeout=30)))
    assert code is grpc.StatusCode.UNAUTHENTICATED and "bearer" in details


async def _stream_all(call) -> list[pb.Reply]:  # type: ignore[no-untyped-def]
    return [reply async for reply in call]


async def test_a_transcription_whose_caller_went_away_stops_at_the_next_segment(speech: Speech) -> None:
    long = speech.fox.with_name("long.wav")  # three of Whisper's 30 s windows: the sentence, then silence
    with wave.open(str(speech.fox), "rb") as source:
        params, frames = source.getparams(), source.readframes(source.getnframes())
    with wave.open(str(long), "wb") as out:
        out.setparams(params)
        for _ in range(3):
            out.writeframes(frames + b"\0\0" * (30 * params.framerate - len(frames) // 2))
    code, _ = await _refusal(
        speech.stt.AudioTranscription(
            pb.TranscriptRequest(dst=str(long), ModelIdentity=speech.stt_identity), metadata=AUTH, timeout=1.0
        )
    )
    assert code is grpc.StatusCode.DEADLINE_EXCEEDED

    async def stopped() -> bool:
        return any(f"transcription of {long} stopped after" in line for line in speech.stt_log)

    await wait_for_async(
        stopped, "the backend to log that it stopped the abandoned transcription", timeout_s=90
    )
    result = await _transcribe(speech, speech.fox)  # the engine is free again
    assert word_error_rate(SENTENCE, result.text) <= WER_MAX


# --- through corral: a frontend and a worker that installs the backends itself -------------------------------


@pytest.fixture(scope="module")
def cluster(
    state_root: Path, make_database: Callable[[], str], nats_url: str, audio_backends_path: Path
) -> Iterator[Cluster]:
    c = Cluster(root=state_root / "e2e-speech", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    audio.prepare_whisper(c.models_dir)
    audio.prepare_piper_voice(c.models_dir)
    try:
        c.start_frontend()
        c.start_worker("w1", "--backends-path", str(audio_backends_path))
        yield c
    finally:
        c.stop()


def _ephemeral(cluster: Cluster) -> list[Path]:
    root = cluster.root / "w1" / "staging" / "ephemeral"
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def test_speech_and_transcription_through_corral(cluster: Cluster) -> None:
    url = cluster.frontend_url
    spoken = httpx.post(
        f"{url}/v1/audio/speech",
        json={
            "model": audio.PIPER_NAME,
            "input": SENTENCE,
            "voice": "en_US-joe-medium",
            "response_format": "wav",
        },
        timeout=300,
    )
    assert spoken.status_code == 200, spoken.text
    assert spoken.content[4:8] == b"\xff\xff\xff\xff"  # streamed as piper speaks (TTSStream): sizes unknown
    with wave.open(io.BytesIO(spoken.content)) as wav:
        assert wav.getnchannels() == 1 and wav.getframerate() == 22050 and wav.getsampwidth() == 2
    assert (
        1.5 < (len(spoken.content) - 44) / 2 / 22050 < 5.0
    )  # seconds of 16-bit mono after the 44-byte header
    mp3 = httpx.post(
        f"{url}/v1/audio/speech",
        json={"model": audio.PIPER_NAME, "input": SENTENCE, "voice": "joe", "response_format": "mp3"},
        timeout=300,
    )
    assert mp3.status_code == 200 and mp3.content[:2] in (b"\xff\xf3", b"\xff\xfb", b"ID"), mp3.text

    for audio_bytes, name in ((spoken.content, "speech.wav"), (mp3.content, "speech.mp3")):
        heard = httpx.post(
            f"{url}/v1/audio/transcriptions",
            files={"file": (name, audio_bytes)},
            data={"model": audio.WHISPER_NAME, "response_format": "verbose_json"},
            timeout=300,
        )
        assert heard.status_code == 200, heard.text
        body = heard.json()
        assert word_error_rate(SENTENCE, body["text"]) <= WER_MAX, (name, body["text"])
        assert body["language"] in ("en", "english") and body["segments"][0]["start"] >= 0
        assert 0 < body["segments"][-1]["end"] <= body["duration"] + 0.05
    translated = httpx.post(
        f"{url}/v1/audio/translations",
        files={"file": ("speech.wav", spoken.content)},
        data={"model": audio.WHISPER_NAME},
        timeout=300,
    )
    assert translated.status_code == 200 and word_error_rate(SENTENCE, translated.json()["text"]) <= WER_MAX

    wrong_voice = httpx.post(
        f"{url}/v1/audio/speech",
        json={"model": audio.PIPER_NAME, "input": "hi", "voice": "alloy"},
        timeout=300,
    )
    assert wrong_voice.status_code == 400 and "'alloy'" in wrong_voice.text, wrong_voice.text
    not_audio = httpx.post(
        f"{url}/v1/audio/transcriptions",
        files={"file": ("notes.txt", b"not sound at all")},
        data={"model": audio.WHISPER_NAME},
        timeout=300,
    )
    assert not_audio.status_code == 400 and "is not audio this backend can decode" in not_audio.text, (
        not_audio.text
    )
    assert _ephemeral(cluster) == []  # every upload and every speech file was released
