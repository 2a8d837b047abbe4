"""``Content-Range`` of a resumable PUT: ``bytes <start>-<end>/<total>`` (inclusive end), or the status
query ``bytes */<total>`` (empty body: "finalise the file if complete, else tell me where to resume")."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ContentRange:
    start: int
    end: int
    total: int

    @property
    def length_bytes(self) -> int:
        return self.end - self.start + 1


def parse_content_range(value: str) -> ContentRange:
    """Parse a Content-Range header; raises ValueError naming what is wrong with it."""
    text = value.strip()
    if not text.startswith("bytes "):
        raise ValueError(f"invalid Content-Range {value!r}: missing 'bytes' prefix")
    range_part, slash, total_part = text[len("bytes ") :].strip().partition("/")
    start_part, dash, end_part = range_part.partition("-")
    if not slash or not dash:
        raise ValueError(f"invalid Content-Range {value!r}: expected 'bytes <start>-<end>/<total>'")
    try:
        start, end, total = int(start_part), int(end_part), int(total_part)
    except ValueError:
        raise ValueError(f"invalid Content-Range {value!r}: start, end and total must be integers") from None
    if start < 0 or end < start or total < end + 1:
        raise ValueError(f"invalid Content-Range range: {start}-{end}/{total}")
    return ContentRange(start, end, total)


def parse_status_query(value: str) -> int | None:
    """The total of ``bytes */<total>``, or None when ``value`` is not that form."""
    text = value.strip()
    if not text.startswith("bytes */"):
        return None
    total = text[len("bytes */") :].strip()
    return int(total) if total.isascii() and total.isdigit() else None  # not '²': isdigit, yet int() fails
