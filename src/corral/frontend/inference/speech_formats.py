"""Speech in the format the client asked for (`response_format` of /v1/audio/speech): the backend writes a WAV;
`wav` passes it through, `pcm` is raw 16-bit little-endian mono at 24 kHz (OpenAI's), `flac`, `mp3` and `opus`
(in Ogg, at 24 kHz) are encoded with libsndfile (the `soundfile` wheel). OpenAI's `aac` has no encoder here: a
400 naming it."""

from __future__ import annotations

import io

import numpy as np

FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
ENCODED = ("mp3", "opus", "flac", "wav", "pcm")
MEDIA_TYPES = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}
PCM_RATE = 24000  # OpenAI's pcm and the rate Opus is written at (one Opus supports)
_SOUNDFILE = {"mp3": ("MP3", "MPEG_LAYER_III"), "opus": ("OGG", "OPUS"), "flac": ("FLAC", "PCM_16")}


def resampled(samples: np.ndarray, rate: int, target: int) -> np.ndarray:
    if rate == target or len(samples) == 0:
        return samples
    count = max(1, round(len(samples) * target / rate))
    positions = np.linspace(0, len(samples) - 1, count)
    return np.interp(positions, np.arange(len(samples)), samples.astype(np.float64)).astype(np.int16)


def encode(wav: bytes, response_format: str) -> bytes:
    """`wav` (what the backend wrote) in `response_format` (one of ENCODED)."""
    if response_format == "wav":
        return wav
    import soundfile  # loads libsndfile: only when speech is encoded

    samples, rate = soundfile.read(io.BytesIO(wav), dtype="int16", always_2d=True)
    mono = samples.mean(axis=1).astype(np.int16) if samples.shape[1] > 1 else samples[:, 0]
    if response_format == "pcm":
        return resampled(mono, rate, PCM_RATE).astype("<i2").tobytes()
    if response_format == "opus":
        mono, rate = resampled(mono, rate, PCM_RATE), PCM_RATE
    container, subtype = _SOUNDFILE[response_format]
    out = io.BytesIO()
    soundfile.write(out, mono, rate, format=container, subtype=subtype)
    return out.getvalue()
