from __future__ import annotations

import io
import struct
import wave
from pathlib import Path

import numpy as np
import pytest

from corral.frontend.errors import APIError
from corral.frontend.inference.speech_stream import PcmRelay, _sample_rate, wav_header
from corral.models.config import ModelConfig
from corral.proto import backend_pb2 as pb
from corral.routing import calls


def _patched(streamed: bytes) -> bytes:
    """A streamed WAV with its unknown sizes filled in, as a file writer would at the end."""
    return (
        streamed[:4]
        + struct.pack("<I", len(streamed) - 8)
        + streamed[8:40]
        + struct.pack("<I", len(streamed) - 44)
        + streamed[44:]
    )


def test_a_streamed_wav_header_says_its_sizes_are_unknown_and_parses_once_they_are_filled_in() -> None:
    pcm = np.arange(-500, 500, dtype="<i2").tobytes()
    streamed = wav_header(22050) + pcm
    assert streamed[4:8] == streamed[40:44] == b"\xff\xff\xff\xff" and len(streamed) == 44 + len(pcm)
    with wave.open(io.BytesIO(_patched(streamed))) as audio:
        assert (audio.getnchannels(), audio.getsampwidth(), audio.getframerate()) == (1, 2, 22050)
        assert audio.readframes(audio.getnframes()) == pcm


def test_wav_passes_the_pcm_through_and_holds_back_an_odd_byte_until_its_sample_is_whole() -> None:
    relay = PcmRelay("wav", 16000)
    assert relay.start() == wav_header(16000)
    assert relay.chunk(b"\x01\x02\x03") == b"\x01\x02"
    assert relay.chunk(b"\x04\x05\x06") == b"\x03\x04\x05\x06"


def test_pcm_is_24_khz_each_chunk_resampled_on_its_own() -> None:
    relay = PcmRelay("pcm", 16000)
    assert relay.start() == b""
    chunk = np.full(960, 1000, dtype="<i2").tobytes()  # 60 ms at 16 kHz
    out = relay.chunk(chunk)
    assert len(out) == 1440 * 2 and set(np.frombuffer(out, dtype="<i2")) == {1000}
    assert PcmRelay("pcm", 24000).chunk(chunk) == chunk  # already 24 kHz: as it came


@pytest.mark.parametrize("first", [pb.Reply(message=b'{"rate": 16000}'), pb.Reply(message=b"ok"), calls.EOF])
def test_a_stream_that_does_not_begin_with_its_sample_rate_is_a_502_quoting_what_came(first: object) -> None:
    cfg = ModelConfig(name="voice", backend="piper", model="voice.onnx", models_dir=Path("/models"))
    with pytest.raises(APIError) as caught:
        _sample_rate(cfg, first)
    assert caught.value.status == 502
    assert caught.value.message.startswith(
        "model voice: the backend's TTSStream began without its sample rate"
    )
