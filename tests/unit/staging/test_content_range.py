"""Content-Range of a resumable PUT: its edges and bad input (the common forms are in test_staging_units)."""

from __future__ import annotations

import pytest

from corral.staging.content_range import ContentRange, parse_content_range, parse_status_query


def test_the_length_counts_the_inclusive_end() -> None:
    assert ContentRange(0, 0, 1).length_bytes == 1
    assert ContentRange(40, 99, 100).length_bytes == 60


def test_ranges_past_any_file_system_size_still_parse_exactly() -> None:
    big = 1 << 70
    assert parse_content_range(f"bytes {big}-{big}/{big + 1}") == ContentRange(big, big, big + 1)


def test_a_range_may_end_before_the_total() -> None:
    assert parse_content_range("bytes 0-9/100").length_bytes == 10


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("", "missing 'bytes' prefix"),
        ("Bytes 0-1/2", "missing 'bytes' prefix"),
        ("bytes=0-1/2", "missing 'bytes' prefix"),
        ("bytes -1-5/10", "must be integers"),  # a negative start splits at its own minus
        ("bytes 0-1/*", "must be integers"),  # an unknown total is not accepted
        ("bytes 0-/2", "must be integers"),
        ("bytes 0-1/", "must be integers"),
        ("bytes 01", "expected 'bytes <start>-<end>/<total>'"),
        ("bytes 0/5", "expected 'bytes <start>-<end>/<total>'"),
        ("bytes 5-4/10", "invalid Content-Range range: 5-4/10"),
        ("bytes 0-0/0", "invalid Content-Range range: 0-0/0"),
        ("bytes 0-1/-2", "invalid Content-Range range"),
    ],
)
def test_bad_headers_name_what_is_wrong(header: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_content_range(header)


def test_a_status_query_is_only_the_star_form() -> None:
    assert parse_status_query(" bytes */0 ") == 0
    assert parse_status_query("bytes */ 12 ") == 12
    for other in ("", "bytes */", "bytes */-1", "bytes */1.5", "bytes * /1", "bytes 0-0/1", "*/5"):
        assert parse_status_query(other) is None


@pytest.mark.parametrize("header", ["bytes */\u00b2", "bytes */1\u00b9"])
def test_a_status_query_with_digits_int_cannot_read_is_not_a_status_query(header: str) -> None:
    assert parse_status_query(header) is None


@pytest.mark.parametrize(
    "header, parsed",
    [
        ("bytes 0-99/100", ContentRange(0, 99, 100)),  # the whole file
        ("bytes 40-99/100", ContentRange(40, 99, 100)),  # a resumed tail
        (" bytes 0-0/1 ", ContentRange(0, 0, 1)),  # one byte, padded
    ],
)
def test_content_range_parses_start_end_total(header: str, parsed: ContentRange) -> None:
    assert parse_content_range(header) == parsed


@pytest.mark.parametrize(
    "header, message",
    [
        ("0-99/100", "missing 'bytes' prefix"),
        ("bytes 0-99", "expected 'bytes <start>-<end>/<total>'"),
        ("bytes a-b/c", "start, end and total must be integers"),
        ("bytes 50-10/100", "invalid Content-Range range: 50-10/100"),
        ("bytes 0-100/100", "invalid Content-Range range: 0-100/100"),
    ],
)
def test_malformed_content_range_names_the_problem(header: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_content_range(header)


def test_status_query_form_is_recognised_only_with_a_numeric_total() -> None:
    assert parse_status_query("bytes */1000") == 1000
    assert parse_status_query("bytes */x") is None
    assert parse_status_query("bytes 0-1/2") is None
