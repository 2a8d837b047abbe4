"""A transcription rendered in each response_format, as OpenAI answers it (segment times in ns)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from corral.frontend.inference.transcripts import FORMATS, MEDIA_TYPES, NS, render, srt, verbose, vtt


@dataclass
class Segment:
    id: int
    start: int
    end: int
    text: str
    tokens: list[int] = field(default_factory=list)


@dataclass
class Result:
    text: str
    segments: list[Segment]
    language: str | None = "en"
    duration: float = 0.0


MS = 1_000_000
SEGMENTS = [
    Segment(0, 0, 1500 * MS, " Hello there. ", [1, 2]),
    Segment(1, 3_723_456 * MS, 3_725_000 * MS, "Second line\n"),  # 1h 2m 3.456s
]
RESULT = Result("Hello there. Second line", SEGMENTS, duration=3725.0004)


def test_every_format_has_a_media_type() -> None:
    assert set(MEDIA_TYPES) == set(FORMATS)
    assert MEDIA_TYPES["vtt"].startswith("text/vtt") and MEDIA_TYPES["srt"].startswith("application/x-subrip")


def test_json_is_only_the_text() -> None:
    assert render(RESULT, "json", "transcribe", 0.0) == {"text": "Hello there. Second line"}


def test_text_is_the_bare_text() -> None:
    assert render(RESULT, "text", "transcribe", 0.0) == "Hello there. Second line"


def test_srt_numbers_cues_from_one_with_comma_milliseconds_and_trimmed_text() -> None:
    assert render(RESULT, "srt", "transcribe", 0.0) == (
        "1\n00:00:00,000 --> 00:00:01,500\nHello there.\n\n2\n01:02:03,456 --> 01:02:05,000\nSecond line\n\n"
    )


def test_vtt_has_its_header_and_dot_milliseconds() -> None:
    assert render(RESULT, "vtt", "translate", 0.0) == (
        "WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nHello there.\n\n01:02:03.456 --> 01:02:05.000\nSecond line\n\n"
    )


def test_no_segments_render_as_empty_cue_lists() -> None:
    assert srt([]) == ""
    assert vtt([]) == "WEBVTT\n\n"


def test_negative_times_clamp_to_zero_and_sub_millisecond_times_truncate() -> None:
    assert srt([Segment(0, -5 * NS, 999_999, "x")]) == "1\n00:00:00,000 --> 00:00:00,000\nx\n\n"


def test_hours_past_99_keep_every_digit() -> None:
    assert vtt([Segment(0, 100 * 3600 * NS, 100 * 3600 * NS + MS, "x")]).startswith(
        "WEBVTT\n\n100:00:00.000 --> 100:00:00.001"
    )


def test_verbose_json_carries_task_language_duration_and_seconds() -> None:
    body = verbose(RESULT, "translate", 0.2)
    assert (body["task"], body["language"], body["duration"], body["text"]) == (
        "translate",
        "en",
        3725.0,
        "Hello there. Second line",
    )
    assert body["segments"][0] == {
        "id": 0,
        "seek": 0,
        "start": 0.0,
        "end": 1.5,
        "text": " Hello there. ",  # untrimmed, as OpenAI's verbose segments are
        "tokens": [1, 2],
        "temperature": 0.2,
    }
    assert body["segments"][1]["start"] == pytest.approx(3723.456)
    assert render(RESULT, "verbose_json", "translate", 0.2) == body


def test_an_unknown_language_is_an_empty_string() -> None:
    assert verbose(Result("t", [], language=None), "transcribe", 0.0)["language"] == ""
    assert verbose(Result("t", [], language=""), "transcribe", 0.0)["segments"] == []
