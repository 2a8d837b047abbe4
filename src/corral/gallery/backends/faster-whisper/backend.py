#!/usr/bin/env python3
"""faster-whisper backend: speech to text (AudioTranscription) with a CTranslate2 Whisper model.

A gallery backend in the reference's Python layout (LocalAI calls it `faster-whisper`): it runs from its
own virtual environment and is started by the worker as `run.sh --addr HOST:PORT`; the backend contract
around the engine (bearer auth, identity guard, models-root and staging confinement, parent watch,
graceful stop) is `common/corral_backend.py`.

LoadModel takes a CTranslate2 Whisper directory (`model.bin`, `config.json`, `tokenizer.json`: what
faster-whisper's converter writes) below the worker's models directory, never a hub id. Options
`device:cpu|cuda|auto` (cpu) and `compute_type:<CTranslate2 type>` (int8); `Threads` sets the CPU threads (0: the cores, at most 4).

AudioTranscription decodes `dst` with PyAV (any format FFmpeg reads: WAV, MP3, OGG/Opus, FLAC, M4A,
WebM...; the file must lie in the worker's staging directory), then runs Whisper with `language`
(empty: detected), `translate` (Whisper's translate task: into English), `prompt` (initial_prompt) and
`temperature` (0: Whisper's fallback schedule 0, 0.2 ... 1.0; above 0: that temperature alone).
Segments carry int64 nanosecond start/end and Whisper's token ids; `language` is what was heard (or
told) and `duration` the audio's seconds. A call whose client gave up stops at the next segment.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach the hub: models come staged by the worker
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import backend_pb2
import grpc
import grpc.aio
from corral_backend import BaseServicer, RequestError, invalid, main, model_path, request_file

NAME = "faster-whisper"
MODEL_FILES = (
    "model.bin",
    "config.json",
    "tokenizer.json",
)  # tokenizer.json: else faster-whisper asks the hub
SAMPLE_RATE_HZ = 16_000  # what Whisper listens at; decode_audio resamples to it
NS_PER_S = 1_000_000_000
BEAM_SIZE = 5
FALLBACK_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # Whisper's own schedule, for temperature 0
DEFAULT_OPTIONS = {"device": "cpu", "compute_type": "int8"}
DEFAULT_THREADS_MAX = (
    4  # Threads 0: the cores, at most this (CTranslate2's own default is 4 whatever the cores)
)

logging.getLogger("faster_whisper").setLevel(
    logging.WARNING
)  # not two INFO lines per request in the worker's log
log = logging.getLogger(NAME)


def resolve_model_dir(opts: Any) -> Path:
    """The CTranslate2 directory LoadModel names (or the directory of a file inside it)."""
    named: tuple[Path, str] = model_path(opts)  # corral_backend is beside this file once installed
    path, field = named
    if path.is_file():
        path = path.parent
    missing = [name for name in MODEL_FILES if not (path / name).is_file()]
    if missing:
        raise RequestError(
            grpc.StatusCode.NOT_FOUND,
            f"LoadModel {field} {str(path)!r} is not a CTranslate2 Whisper model directory (missing "
            f"{', '.join(missing)}); models are read from staged files only, never downloaded",
        )
    return path


def load_options(opts: Any) -> dict[str, str]:
    """`device` and `compute_type` from the model config's `options:` (key:value); other keys are refused."""
    chosen = dict(DEFAULT_OPTIONS)
    for option in opts.Options:
        key, sep, value = option.partition(":")
        if not sep or key not in DEFAULT_OPTIONS or not value:
            raise invalid(
                f"option {option!r} is not one faster-whisper takes; use "
                f"{', '.join(f'{k}:<value>' for k in DEFAULT_OPTIONS)}"
            )
        chosen[key] = value
    return chosen


class Engine:
    """One WhisperModel; every method blocks and runs off the event loop."""

    def __init__(self) -> None:
        self.model: Any = None
        self.identity = ""

    def load(self, opts: Any) -> str:
        directory = resolve_model_dir(opts)
        chosen = load_options(opts)
        from faster_whisper import WhisperModel

        threads = opts.Threads if opts.Threads > 0 else min(DEFAULT_THREADS_MAX, os.cpu_count() or 1)
        model = WhisperModel(
            str(directory),
            device=chosen["device"],
            compute_type=chosen["compute_type"],
            cpu_threads=threads,
            num_workers=1,
            local_files_only=True,
        )
        self.free()
        self.model, self.identity = model, opts.Model
        kind = "multilingual" if model.model.is_multilingual else "English-only"
        return (
            f"loaded {directory.name} ({kind} Whisper, {chosen['device']}, {chosen['compute_type']}, "
            f"{threads} CPU threads)"
        )

    def free(self) -> None:
        self.model, self.identity = None, ""
        gc.collect()

    def is_loaded(self) -> bool:
        return self.model is not None

    def transcribe(self, request: Any, cancelled: threading.Event) -> Any:
        model = self.model
        if model is None:
            raise RequestError(grpc.StatusCode.FAILED_PRECONDITION, "model not loaded: call LoadModel first")
        settings = self._settings(model, request)
        audio = decode(request_file(request, "dst"))
        segments, info = model.transcribe(audio, beam_size=BEAM_SIZE, **settings)
        result = backend_pb2.TranscriptResult(language=info.language, duration=float(info.duration))
        for number, segment in enumerate(
            segments
        ):  # a lazy generator: the work happens here, window by window
            if cancelled.is_set():
                log.info(
                    "transcription of %s stopped after %d segments: the caller went away", request.dst, number
                )
                raise RequestError(grpc.StatusCode.CANCELLED, "the caller gave up; transcription stopped")
            text = segment.text.strip()
            result.segments.append(
                backend_pb2.TranscriptSegment(
                    id=number,
                    start=round(segment.start * NS_PER_S),
                    end=round(segment.end * NS_PER_S),
                    text=text,
                    tokens=list(segment.tokens),
                )
            )
        result.text = " ".join(s.text for s in result.segments if s.text)
        return result

    @staticmethod
    def _settings(model: Any, request: Any) -> dict[str, Any]:
        """faster-whisper's arguments for the request's language, translate, prompt and temperature."""
        if request.diarize:
            raise invalid("TranscriptRequest.diarize: faster-whisper does not tell speakers apart")
        language = request.language.strip().lower() or None
        if language is not None and language not in model.supported_languages:
            only = (
                "this model is English-only"
                if not model.model.is_multilingual
                else f"use one of {', '.join(model.supported_languages)}"
            )
            raise invalid(
                f"TranscriptRequest.language {request.language!r} is not a language this model "
                f"knows: {only} (or leave it empty to detect it)"
            )
        if request.translate and not model.model.is_multilingual:
            raise invalid(
                "TranscriptRequest.translate: this Whisper model is English-only and cannot translate; "
                "serve a multilingual one (e.g. base, not base.en)"
            )
        temperature = request.temperature
        if not 0.0 <= temperature <= 1.0:
            raise invalid(f"TranscriptRequest.temperature {temperature:g} must be between 0 and 1")
        return {
            "language": language,
            "task": "translate" if request.translate else "transcribe",
            "initial_prompt": request.prompt or None,
            "temperature": FALLBACK_TEMPERATURES if temperature == 0 else (temperature,),
        }


def decode(path: Path) -> Any:
    """The audio as 16 kHz mono float32 samples; a file PyAV cannot read as audio is INVALID_ARGUMENT."""
    import av
    from faster_whisper import decode_audio

    if not path.is_file():
        raise invalid(f"TranscriptRequest.dst {str(path)!r} is not a file")
    try:
        with av.open(str(path), mode="r", metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise _undecodable(
                    path, f"it holds no audio stream (PyAV reads it as {container.format.name})"
                )
        audio = decode_audio(str(path), sampling_rate=SAMPLE_RATE_HZ)
    except av.error.FFmpegError as exc:
        raise _undecodable(path, exc.strerror or str(exc)) from None
    if audio.size == 0:
        raise _undecodable(path, "it holds no audio samples")
    return audio


def _undecodable(path: Path, reason: str) -> RequestError:
    return invalid(
        f"TranscriptRequest.dst {path.name!r} is not audio this backend can decode: {reason}; "
        "send WAV, MP3, OGG/Opus, FLAC, M4A or WebM"
    )


class Servicer(BaseServicer):  # type: ignore[misc]  # corral_backend is beside this file once installed
    engine: Engine

    async def AudioTranscription(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        cancelled = threading.Event()
        context.add_done_callback(lambda _: cancelled.set())
        return await self.call(
            context, "AudioTranscription", request.ModelIdentity, self.engine.transcribe, request, cancelled
        )


if __name__ == "__main__":
    raise SystemExit(main(NAME, "faster-whisper backend", lambda executor: Servicer(Engine(), executor)))
