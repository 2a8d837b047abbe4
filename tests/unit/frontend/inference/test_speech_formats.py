"""Speech in the requested format: WAV passed through, PCM at 24 kHz mono, encoded formats via libsndfile."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile

from corral.frontend.inference.speech_formats import (
    ENCODED,
    FORMATS,
    MEDIA_TYPES,
    PCM_RATE,
    encode,
    resampled,
)


def wav(samples: np.ndarray, rate: int) -> bytes:
    out = io.BytesIO()
    soundfile.write(out, samples, rate, format="WAV", subtype="PCM_16")
    return out.getvalue()


RAMP = np.arange(0, 1200, dtype=np.int16)  # 50 ms at 24 kHz


def test_every_encoded_format_has_a_media_type_and_aac_is_not_encoded() -> None:
    assert set(MEDIA_TYPES) == set(ENCODED)
    assert set(ENCODED) | {"aac"} == set(FORMATS)


def test_the_same_rate_or_no_samples_are_left_as_they_are() -> None:
    assert resampled(RAMP, 24000, 24000) is RAMP
    empty = np.zeros(0, dtype=np.int16)
    assert resampled(empty, 16000, 24000) is empty


def test_resampling_scales_the_count_and_keeps_the_ends() -> None:
    up = resampled(RAMP, 16000, 24000)
    assert len(up) == 1800 and up.dtype == np.int16
    assert (int(up[0]), int(up[-1])) == (0, 1199)
    down = resampled(RAMP, 48000, 24000)
    assert len(down) == 600 and int(down[-1]) == 1199


def test_a_single_sample_never_resamples_to_nothing() -> None:
    assert len(resampled(np.array([7], dtype=np.int16), 48000, 8000)) == 1


def test_wav_is_passed_through_byte_for_byte() -> None:
    body = b"RIFF not even parsed"
    assert encode(body, "wav") is body


def test_pcm_is_raw_little_endian_16_bit_mono_at_24khz() -> None:
    stereo = np.stack([RAMP, RAMP + 2], axis=1)
    pcm = encode(wav(stereo, 24000), "pcm")
    samples = np.frombuffer(pcm, dtype="<i2")
    assert len(samples) == len(RAMP)
    assert samples[:3].tolist() == [1, 2, 3]  # the two channels averaged


def test_pcm_from_another_rate_is_resampled_to_24khz() -> None:
    assert len(encode(wav(RAMP, 48000), "pcm")) == 2 * 600


@pytest.mark.parametrize(("response_format", "container"), [("flac", "FLAC"), ("opus", "OGG")])
def test_encoded_formats_decode_back_to_the_speech(response_format: str, container: str) -> None:
    out = encode(wav(RAMP, 16000), response_format)
    info = soundfile.info(io.BytesIO(out))
    assert info.format == container and info.channels == 1
    assert info.samplerate == (PCM_RATE if response_format == "opus" else 16000)


def test_what_is_not_a_wav_is_refused_by_the_decoder() -> None:
    with pytest.raises(soundfile.LibsndfileError):
        encode(b"\x00\xffnot audio", "pcm")
