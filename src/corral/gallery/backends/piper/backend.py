#!/usr/bin/env python3
"""piper backend: text to speech (TTS) with a Piper voice (VITS exported to ONNX, run by onnxruntime).

A gallery backend in the reference's Python layout (LocalAI calls it `piper`): it runs from its own
virtual environment and is started by the worker as `run.sh --addr HOST:PORT`; the backend contract
around the engine (bearer auth, identity guard, models-root and staging confinement, parent watch,
graceful stop) is `common/corral_backend.py`. piper-tts ships espeak-ng and its data: no system package.

LoadModel takes the voice's `.onnx` file (the model config's `parameters.model`) with its `.onnx.json`
beside it, below the worker's models directory; `Threads` sets onnxruntime's threads.

TTS writes a 16-bit mono WAV at the voice's sample rate to `dst` (a file in the worker's staging
directory); TTSStream sends the same speech as raw PCM, a sentence per Reply, as it is synthesised. `speed` (0.25-4; 0: the voice's own) divides the voice's length_scale; `voice` may be empty
or name the loaded voice (its file name with or without `.onnx`, its dataset name, or the model's name),
or one speaker of a multi-speaker voice; any other voice is refused naming it, as is a `language` the
voice does not speak.
"""

from __future__ import annotations

import gc
import json
import wave
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import backend_pb2  # (generated from corral's backend.proto, in common/)
import grpc
import grpc.aio
from corral_backend import BaseServicer, RequestError, invalid, main, model_path, request_file

NAME = "piper"
VOICE_SUFFIX = ".onnx"
CONFIG_SUFFIX = ".onnx.json"
SPEED_MIN, SPEED_MAX = 0.25, 4.0  # OpenAI's bounds for /v1/audio/speech
SAMPLE_WIDTH_BYTES = 2


def resolve_voice(opts: Any) -> tuple[Path, Path]:
    """The voice's .onnx file LoadModel names and its .onnx.json config."""
    path, field = model_path(opts)
    if path.is_dir():
        voices = sorted(path.glob(f"*{VOICE_SUFFIX}"))
        if len(voices) != 1:
            raise RequestError(
                grpc.StatusCode.NOT_FOUND,
                f"LoadModel {field} {str(path)!r} is a directory with {len(voices)} .onnx voices; "
                "name the voice file itself",
            )
        path = voices[0]
    if path.suffix != VOICE_SUFFIX or not path.is_file():
        raise RequestError(
            grpc.StatusCode.NOT_FOUND,
            f"LoadModel {field} {str(path)!r} is not a Piper voice file (.onnx); models are read "
            "from staged files only, never downloaded",
        )
    config = path.with_name(path.name + ".json")
    if not config.is_file():
        raise RequestError(
            grpc.StatusCode.NOT_FOUND,
            f"LoadModel {field}: the voice {path.name!r} has no config {config.name!r} beside it "
            "(Piper voices come as a .onnx with its .onnx.json)",
        )
    return path, config


class Engine:
    """One PiperVoice; every method blocks and runs off the event loop."""

    def __init__(self) -> None:
        self.voice: Any = None
        self.identity = ""
        self.names: set[str] = set()  # what `voice` may say to mean the loaded one

    def load(self, opts: Any) -> str:
        path, config_path = resolve_voice(opts)
        import onnxruntime
        from piper import PiperVoice
        from piper.config import PiperConfig

        try:
            config = PiperConfig.from_dict(json.loads(config_path.read_text(encoding="utf-8")))
        except (ValueError, KeyError, TypeError) as exc:
            raise invalid(
                f"LoadModel: {config_path.name!r} is not a Piper voice config: {type(exc).__name__}: {exc}"
            ) from None
        options = onnxruntime.SessionOptions()
        if opts.Threads > 0:
            options.intra_op_num_threads = opts.Threads
        session = onnxruntime.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        voice = PiperVoice(session=session, config=config, download_dir=path.parent)
        self.free()
        self.voice, self.identity = voice, opts.Model
        dataset = json.loads(config_path.read_text(encoding="utf-8")).get("dataset")
        self.names = {n for n in (path.name, path.stem, opts.Model, dataset) if isinstance(n, str) and n}
        return (
            f"loaded voice {path.name} ({config.espeak_voice}, {config.sample_rate} Hz, "
            f"{config.num_speakers} speaker{'s' if config.num_speakers != 1 else ''})"
        )

    def free(self) -> None:
        self.voice, self.identity, self.names = None, "", set()
        gc.collect()

    def is_loaded(self) -> bool:
        return self.voice is not None

    def speak(self, request: Any) -> Any:
        """Write the speech of `request.text` as a WAV to `request.dst`."""
        voice, synthesis = self._prepare(request)
        dst = request_file(request, "dst")
        if not dst.parent.is_dir():
            raise invalid(f"TTSRequest.dst {str(dst)!r}: its directory does not exist")
        frames = 0
        with wave.open(str(dst), "wb") as wav:
            wav.setframerate(voice.config.sample_rate)
            wav.setsampwidth(SAMPLE_WIDTH_BYTES)
            wav.setnchannels(1)
            for chunk in voice.synthesize(request.text, syn_config=synthesis):
                wav.writeframes(chunk.audio_int16_bytes)
                frames += len(chunk.audio_int16_array)
        seconds = frames / voice.config.sample_rate
        return backend_pb2.Result(
            success=True,
            message=f"wrote {seconds:.2f} s of speech ({voice.config.sample_rate} Hz WAV) to {dst.name}",
        )

    def stream(self, request: Any) -> tuple[int, Iterator[bytes]]:
        """The voice's sample rate and its speech of `request.text` as 16-bit mono PCM, a sentence at a time
        (lazy: each `next` synthesises one sentence)."""
        voice, synthesis = self._prepare(request)
        chunks = voice.synthesize(request.text, syn_config=synthesis)
        return int(voice.config.sample_rate), (chunk.audio_int16_bytes for chunk in chunks)

    def _prepare(self, request: Any) -> tuple[Any, Any]:
        """The loaded voice and the synthesis settings of a request, or the refusal naming its field."""
        voice = self.voice
        if voice is None:
            raise RequestError(grpc.StatusCode.FAILED_PRECONDITION, "model not loaded: call LoadModel first")
        from piper.config import SynthesisConfig

        if not request.text.strip():
            raise invalid("TTSRequest.text is empty: give the text to speak")
        self._check_language(voice, request)
        return voice, SynthesisConfig(
            speaker_id=self._speaker(voice, request.voice),
            length_scale=self._length_scale(voice, request.speed),
        )

    def _speaker(self, voice: Any, name: str) -> int | None:
        """None for the voice's own speaker; a speaker id when `name` is one of a multi-speaker voice's."""
        if not name or name in self.names:
            return None
        speakers = voice.config.speaker_id_map or {}
        if name in speakers:
            return int(speakers[name])
        known = sorted(self.names) + sorted(speakers)
        raise invalid(
            f"TTSRequest.voice {name!r} is not served by this model: it speaks with the Piper voice "
            f"{sorted(self.names)[0]!r}; leave voice empty or use one of {', '.join(known)}"
        )

    @staticmethod
    def _length_scale(voice: Any, speed: float) -> float | None:
        if speed == 0:
            return None
        if not SPEED_MIN <= speed <= SPEED_MAX:
            raise invalid(f"TTSRequest.speed {speed:g} must be between {SPEED_MIN:g} and {SPEED_MAX:g}")
        return float(voice.config.length_scale) / speed

    @staticmethod
    def _check_language(voice: Any, request: Any) -> None:
        if not request.HasField("language") or not request.language.strip():
            return
        asked = request.language.strip().lower().replace("_", "-")
        spoken = voice.config.espeak_voice.lower().replace("_", "-")
        if asked.split("-")[0] != spoken.split("-")[0]:
            raise invalid(f"TTSRequest.language {request.language!r}: this voice speaks {spoken!r}")


class Servicer(BaseServicer):  # type: ignore[misc]  # corral_backend is beside this file once installed
    engine: Engine

    async def TTS(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self.call(context, "TTS", request.ModelIdentity, self.engine.speak, request)

    async def TTSStream(self, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        """Speech as it is synthesised, a sentence per Reply (raw PCM in `audio`); the first Reply's `message`
        is {"sample_rate": N}. A caller that goes away stops the synthesis at the next sentence."""
        rate, pcm = await self.call(context, "TTSStream", request.ModelIdentity, self.engine.stream, request)
        header = json.dumps({"sample_rate": rate}).encode()
        while (chunk := await self.call(context, "TTSStream", "", next, pcm, None)) is not None:
            yield backend_pb2.Reply(message=header, audio=chunk)
            header = b""


if __name__ == "__main__":
    raise SystemExit(main(NAME, "piper backend", lambda executor: Servicer(Engine(), executor)))
