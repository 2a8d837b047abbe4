"""A transcription's answer in the format the client asked for (`response_format` of /v1/audio/transcriptions
and /translations): `json` (`{"text"}`), `text`, `srt`, `vtt` or `verbose_json` (task, language, duration,
segments), as OpenAI answers them. Segment times arrive in nanoseconds (the reference's wire unit)."""

from __future__ import annotations

from typing import Any

FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
MEDIA_TYPES = {
    "json": "application/json",
    "verbose_json": "application/json",
    "text": "text/plain; charset=utf-8",
    "srt": "application/x-subrip; charset=utf-8",
    "vtt": "text/vtt; charset=utf-8",
}
NS = 1_000_000_000


def _clock(ns: int, separator: str) -> str:
    ms = max(0, ns) // 1_000_000
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}{separator}{millis:03d}"


def srt(segments: list[Any]) -> str:
    return "".join(
        f"{i}\n{_clock(s.start, ',')} --> {_clock(s.end, ',')}\n{s.text.strip()}\n\n"
        for i, s in enumerate(segments, start=1)
    )


def vtt(segments: list[Any]) -> str:
    return "WEBVTT\n\n" + "".join(
        f"{_clock(s.start, '.')} --> {_clock(s.end, '.')}\n{s.text.strip()}\n\n" for s in segments
    )


def verbose(result: Any, task: str, temperature: float) -> dict[str, Any]:
    return {
        "task": task,
        "language": result.language or "",
        "duration": round(result.duration, 3),
        "text": result.text,
        "segments": [
            {
                "id": s.id,
                "seek": 0,
                "start": round(s.start / NS, 3),
                "end": round(s.end / NS, 3),
                "text": s.text,
                "tokens": list(s.tokens),
                "temperature": temperature,
            }
            for s in result.segments
        ],
    }


def render(result: Any, response_format: str, task: str, temperature: float) -> str | dict[str, Any]:
    """The body: a dict for the JSON formats, text for the others."""
    if response_format == "json":
        return {"text": result.text}
    if response_format == "verbose_json":
        return verbose(result, task, temperature)
    if response_format == "srt":
        return srt(list(result.segments))
    if response_format == "vtt":
        return vtt(list(result.segments))
    return result.text  # type: ignore[no-any-return]
