"""`/v1/audio/speech` streamed as the engine speaks (issue 23): for `wav` and `pcm`, from a backend with TTSStream.

The backend's replies carry raw 16-bit little-endian mono PCM; the first one's `message` is `{"sample_rate": N}`
(backend.proto). The HTTP answer is chunked and sent as the chunks come:

* `wav`: a RIFF/WAVE header whose RIFF and data sizes are 0xFFFFFFFF (unknown, as streaming WAV writers write
  them; players read to the end), then the PCM as it comes.
* `pcm`: OpenAI's 24 kHz PCM, each chunk resampled on its own.

A backend that answers TTSStream with UNIMPLEMENTED or FAILED_PRECONDITION before any audio is asked for the whole
file instead (`open_speech` answers None). The stream is bounded by the first-token and idle budgets of
`calls.ReplyStream`; a client that goes away cancels it (the route runs under CancelOnDisconnect). An error after
the first bytes cannot change the status any more: the connection is cut, so the client sees a truncated body.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import orjson
from fastapi.responses import StreamingResponse

from corral.frontend.errors import APIError
from corral.frontend.inference import speech_formats
from corral.frontend.inference.call_errors import http_errors
from corral.models.config import ModelConfig
from corral.proto import backend_pb2
from corral.routing import calls
from corral.routing.errors import BackendCallError, BackendRefused
from corral.routing.router import Router

log = logging.getLogger(__name__)

STREAMED_FORMATS = frozenset({"wav", "pcm"})
FALLBACK_CODES = frozenset({"UNIMPLEMENTED", "FAILED_PRECONDITION"})  # the backend cannot stream: use TTS
UNKNOWN_SIZE = 0xFFFFFFFF
SAMPLE_BYTES = 2  # 16-bit mono


def wav_header(sample_rate: int) -> bytes:
    """A 16-bit mono PCM WAV header for a stream of unknown length (RIFF and data sizes 0xFFFFFFFF)."""
    fmt = struct.pack(
        "<HHIIHH", 1, 1, sample_rate, sample_rate * SAMPLE_BYTES, SAMPLE_BYTES, 8 * SAMPLE_BYTES
    )
    return (
        b"RIFF"
        + struct.pack("<I", UNKNOWN_SIZE)
        + b"WAVE"
        + b"fmt "
        + struct.pack("<I", len(fmt))
        + fmt
        + b"data"
        + struct.pack("<I", UNKNOWN_SIZE)
    )


class PcmRelay:
    """Turns the backend's PCM chunks into the response's bytes (whole samples only: an odd byte waits)."""

    def __init__(self, response_format: str, sample_rate: int) -> None:
        self.response_format, self.sample_rate = response_format, sample_rate
        self._odd = b""

    def start(self) -> bytes:
        return wav_header(self.sample_rate) if self.response_format == "wav" else b""

    def chunk(self, audio: bytes) -> bytes:
        audio, self._odd = self._odd + audio, b""
        if len(audio) % SAMPLE_BYTES:
            audio, self._odd = audio[:-1], audio[-1:]
        if self.response_format == "wav" or not audio:
            return audio
        samples = np.frombuffer(audio, dtype="<i2")
        return (
            speech_formats.resampled(samples, self.sample_rate, speech_formats.PCM_RATE)
            .astype("<i2")
            .tobytes()
        )


def _sample_rate(cfg: ModelConfig, first: Any) -> int:
    """The rate the first reply names (`first` is EOF when the backend ended the stream without a reply)."""
    message = getattr(first, "message", b"")
    try:
        rate = orjson.loads(message)["sample_rate"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        rate = None
    if not isinstance(rate, int) or isinstance(rate, bool) or rate <= 0:
        raise APIError(
            502,
            f"model {cfg.name}: the backend's TTSStream began without its sample rate (the first "
            f'reply\'s message is {message[:80]!r}, not {{"sample_rate": N}})',
            "server_error",
            "backend_error",
        )
    return rate


async def open_speech(
    router: Router, cfg: ModelConfig, request: backend_pb2.TTSRequest, response_format: str
) -> StreamingResponse | None:
    """The streamed answer, once the backend sent its first chunk; None when the backend cannot stream."""
    async with http_errors(router, cfg, "input"):
        try:
            first, stream = await calls.open_stream(router, cfg, request, "TTSStream")
        except BackendRefused as exc:
            if exc.code in FALLBACK_CODES:
                log.debug(
                    "model %s: TTSStream refused (%s: %s); speaking the whole file",
                    cfg.name,
                    exc.code,
                    exc.details,
                )
                return None
            raise
    try:
        relay = PcmRelay(response_format, _sample_rate(cfg, first))
    except BaseException:
        stream.close()
        raise
    return StreamingResponse(
        _relayed(cfg, first, stream, relay), media_type=speech_formats.MEDIA_TYPES[response_format]
    )


async def _relayed(
    cfg: ModelConfig, first: backend_pb2.Reply, stream: calls.ReplyStream, relay: PcmRelay
) -> AsyncIterator[bytes]:
    try:
        yield relay.start() + relay.chunk(first.audio)
        while (reply := await stream.read()) is not calls.EOF:
            if data := relay.chunk(reply.audio):
                yield data
    except BackendCallError as exc:
        log.warning("model %s: speech stream cut after it began: %s", cfg.name, exc)
        raise
    finally:
        stream.close()
