"""The simulator's modalities (issue 23): speech, transcription and images, deterministic and instant.

* `tts` writes a 16 kHz mono 16-bit WAV: one short tone per character (0.06 s, divided by `speed`), and the
  text itself in the file's RIFF `LIST/INFO/ICMT` chunk.
* `tts_stream` (only with the `speech_chunk_time_s` option) streams the same tones as raw PCM, a chunk per word.
* `transcribe` reads a WAV back: the text of its `ICMT` chunk when the simulator wrote it (so speech made by
  the simulator transcribes to its own words), else "<seconds> seconds of audio"; segments of at most five
  words, timed by their share of the characters. Anything but a PCM WAV is refused.
* `generate_image` writes a PNG of the requested size whose pixels follow the prompt and seed.

Real engines for each live in the backend gallery (whisper, piper, diffusers); these are for tests of
everything around them: routing, staging of request files, formats, errors.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import struct
import time
import wave
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

from corral.backends.engine import InvalidRequestError
from corral.proto import backend_pb2 as pb

SAMPLE_RATE = 16000
CHAR_SECONDS = 0.06
SEGMENT_WORDS = 5
MAX_IMAGE_SIDE = 2048
NS = 1_000_000_000


def speech_frames(text: str, speed: float = 1.0) -> bytes:
    """The simulated speech of `text` as 16-bit little-endian mono PCM at SAMPLE_RATE: a tone per character, so
    the speech of a text is the speech of its pieces one after another."""
    step = CHAR_SECONDS / (speed or 1.0)
    frames = bytearray()
    for char in text:
        pitch = 200 + (ord(char) % 64) * 12
        n = max(1, int(step * SAMPLE_RATE))
        frames += b"".join(
            struct.pack("<h", int(8000 * math.sin(2 * math.pi * pitch * i / SAMPLE_RATE))) for i in range(n)
        )
    return bytes(frames)


def speech_words(text: str) -> list[str]:
    """`text` cut before each word (the pieces joined are `text`): what tts_stream sends a chunk of speech for."""
    return re.findall(r"\s*\S+|\s+$", text)


def write_speech(path: Path, text: str, speed: float = 1.0) -> float:
    """Write the simulated speech of `text`; return its duration in seconds."""
    frames = speech_frames(text, speed)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(SAMPLE_RATE)
        out.writeframes(frames)
    comment = text.encode("utf-8")
    comment += b"\0" * (len(comment) % 2)
    info = b"INFO" + b"ICMT" + struct.pack("<I", len(comment)) + comment
    with path.open("r+b") as out:  # append LIST/INFO and fix the RIFF size
        out.seek(0, 2)
        out.write(b"LIST" + struct.pack("<I", len(info)) + info)
        size = out.tell()
        out.seek(4)
        out.write(struct.pack("<I", size - 8))
    return len(frames) / 2 / SAMPLE_RATE


def _riff_chunks(data: bytes) -> dict[bytes, bytes]:
    chunks, at = {}, 12
    while at + 8 <= len(data):
        kind, size = data[at : at + 4], struct.unpack("<I", data[at + 4 : at + 8])[0]
        body = data[at + 8 : at + 8 + size]
        if kind == b"LIST" and body[:4] == b"INFO":
            inner = 4
            while inner + 8 <= len(body):
                sub, sub_size = body[inner : inner + 4], struct.unpack("<I", body[inner + 4 : inner + 8])[0]
                chunks[sub] = body[inner + 8 : inner + 8 + sub_size]
                inner += 8 + sub_size + sub_size % 2
        else:
            chunks[kind] = body
        at += 8 + size + size % 2
    return chunks


def read_speech(path: Path) -> tuple[str, float]:
    """(text, seconds) of a WAV: its ICMT text if the simulator wrote it."""
    data = path.read_bytes()
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise InvalidRequestError("the simulator transcribes only WAV audio (RIFF/WAVE); send a .wav file")
    chunks = _riff_chunks(data)
    fmt = chunks.get(b"fmt ", b"")
    if len(fmt) < 16:
        raise InvalidRequestError("the WAV file has no format chunk")
    channels, rate, bits = (
        struct.unpack("<H", fmt[2:4])[0],
        struct.unpack("<I", fmt[4:8])[0],
        struct.unpack("<H", fmt[14:16])[0],
    )
    seconds = len(chunks.get(b"data", b"")) / max(1, channels * rate * bits // 8)
    text = chunks.get(b"ICMT", b"").rstrip(b"\0").decode("utf-8", errors="replace")
    return (text or f"{seconds:.1f} seconds of audio"), seconds


def transcript(text: str, seconds: float, language: str) -> pb.TranscriptResult:
    words = text.split()
    groups = [" ".join(words[i : i + SEGMENT_WORDS]) for i in range(0, len(words), SEGMENT_WORDS)] or [""]
    total = sum(len(g) for g in groups) or 1
    segments, start = [], 0.0
    for index, group in enumerate(groups):
        end = start + seconds * len(group) / total
        segments.append(pb.TranscriptSegment(id=index, start=int(start * NS), end=int(end * NS), text=group))
        start = end
    return pb.TranscriptResult(text=text, segments=segments, language=language or "en", duration=seconds)


def write_image(path: Path, prompt: str, seed: int, width: int, height: int) -> None:
    if not (0 < width <= MAX_IMAGE_SIDE and 0 < height <= MAX_IMAGE_SIDE):
        raise InvalidRequestError(f"width and height must be 1..{MAX_IMAGE_SIDE}, got {width}x{height}")
    key = hashlib.blake2b(f"{seed}\0{prompt}".encode(), digest_size=6).digest()
    rows = bytearray()
    for y in range(height):
        rows.append(0)
        for x in range(width):
            rows += bytes(
                (
                    (key[0] + x * key[1] // 16) % 256,
                    (key[2] + y * key[3] // 16) % 256,
                    (key[4] + (x ^ y) * key[5] // 16) % 256,
                )
            )

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body))
            + kind
            + body
            + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(bytes(rows)))
        + chunk(b"IEND", b"")
    )


class SimulatedMedia:
    """The modality methods the simulator engine exposes (mixed into SimulatorEngine, whose `media_time_s` option
    makes each call take that long: a slow engine, for disconnect tests)."""

    def _media_delay(self) -> None:
        seconds = getattr(getattr(self, "settings", None), "media_time_s", 0.0)
        if seconds > 0:
            time.sleep(seconds)

    def tts(self, req: pb.TTSRequest) -> pb.Result:
        if not req.text:
            raise InvalidRequestError("TTSRequest.text is empty")
        if not req.dst:
            raise InvalidRequestError("TTSRequest.dst (where to write the audio) is empty")
        self._media_delay()
        write_speech(Path(req.dst), req.text, req.speed or 1.0)
        return pb.Result(success=True, message="ok")

    @property
    def tts_stream(self) -> Callable[[pb.TTSRequest], Iterator[pb.Reply]] | None:
        """TTSStream's engine call when the `speech_chunk_time_s` option is set; None (not streamed) otherwise."""
        return None if self._speech_chunk_s() is None else self._speech_chunks

    def _speech_chunk_s(self) -> float | None:
        return getattr(getattr(self, "settings", None), "speech_chunk_time_s", None)

    def _speech_chunks(self, req: pb.TTSRequest) -> Iterator[pb.Reply]:
        if not req.text:
            raise InvalidRequestError("TTSRequest.text is empty")
        return self._spoken_words(req.text, req.speed or 1.0, self._speech_chunk_s() or 0.0)

    def _spoken_words(self, text: str, speed: float, chunk_s: float) -> Iterator[pb.Reply]:
        self._media_delay()
        for index, word in enumerate(speech_words(text)):
            if chunk_s > 0:
                time.sleep(chunk_s)
            reply = pb.Reply(audio=speech_frames(word, speed))
            if index == 0:
                reply.message = json.dumps({"sample_rate": SAMPLE_RATE}).encode()
            yield reply

    def transcribe(self, req: pb.TranscriptRequest) -> pb.TranscriptResult:
        path = Path(req.dst)
        if not req.dst or not path.is_file():
            raise InvalidRequestError(f"TranscriptRequest.dst {req.dst!r} is not a file")
        self._media_delay()
        text, seconds = read_speech(path)
        return transcript(text, seconds, req.language)

    def generate_image(self, req: pb.GenerateImageRequest) -> pb.Result:
        if not req.dst:
            raise InvalidRequestError("GenerateImageRequest.dst (where to write the image) is empty")
        self._media_delay()
        write_image(Path(req.dst), req.positive_prompt, req.seed, req.width or 256, req.height or 256)
        return pb.Result(success=True, message="ok")
