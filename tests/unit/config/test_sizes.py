"""Byte sizes: KiB/MiB/GiB are powers of 1024, kB/MB/GB of 1000; messages use one decimal."""

from __future__ import annotations

import pytest

from corral.config.sizes import GIB, format_size, parse_size_bytes


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("0", 0),
        ("4096", 4096),
        ("512MiB", 512 << 20),
        ("50GiB", 50 << 30),
        ("1.5GB", 1_500_000_000),
        ("1.5gb", 1_500_000_000),
        ("2 kB", 2000),
        ("2k", 2000),
        ("1KiB", 1024),
        ("1Ki", 1024),
        ("3B", 3),
        ("1TiB", 1 << 40),
        ("1PB", 10**15),
        ("  7MiB  ", 7 << 20),
    ],
)
def test_sizes_parse_in_decimal_or_binary_units(raw: str, expected: int) -> None:
    assert parse_size_bytes(raw) == expected


@pytest.mark.parametrize(
    "raw", ["", "   ", "MiB", "-1", "1e9", "1.", ".5GiB", "1XiB", "1EiB", "1ib", "1 GiB 2", "½GiB"]
)
def test_what_is_not_a_size_is_refused_with_an_example(raw: str) -> None:
    with pytest.raises(ValueError, match="is not a size; use e.g. 512MiB"):
        parse_size_bytes(raw)


def test_gib_is_a_power_of_two() -> None:
    assert GIB == 1024**3


@pytest.mark.parametrize(
    ("num_bytes", "expected"),
    [
        (0, "0 B"),
        (-5, "0 B"),  # never a negative size in a message
        (999, "999 B"),
        (1000, "1.0 kB"),
        (73_500_000_000, "73.5 GB"),
        (10**15, "1.0 PB"),
        (10**18, "1000.0 PB"),  # past the largest unit: stays in PB
    ],
)
def test_decimal_sizes_read_like_the_specification(num_bytes: int, expected: str) -> None:
    assert format_size(num_bytes) == expected


@pytest.mark.parametrize(
    ("num_bytes", "expected"),
    [
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (70 * GIB, "70.0 GiB"),
        (1 << 50, "1.0 PiB"),
        (1 << 60, "1024.0 PiB"),
    ],
)
def test_binary_sizes_step_by_1024(num_bytes: int, expected: str) -> None:
    assert format_size(num_bytes, binary=True) == expected


def test_a_formatted_size_parses_back_to_about_the_same_bytes() -> None:
    for num_bytes in (1500, 73_500_000_000, 4 * 10**12):
        assert parse_size_bytes(format_size(num_bytes).replace(" ", "")) == pytest.approx(num_bytes, rel=0.05)


@pytest.mark.parametrize(
    "raw, size",
    [
        ("0", 0),
        ("512MiB", 512 << 20),
        ("50GiB", 50 << 30),
        ("1.5GB", 1_500_000_000),
        ("64k", 64_000),
        ("1PiB", 1 << 50),
    ],
)
def test_sizes_in_settings_accept_binary_and_decimal_units(raw: str, size: int) -> None:
    assert parse_size_bytes(raw) == size


@pytest.mark.parametrize("raw", ["", "-1", "5 apples", "1ZB", "i"])
def test_bad_sizes_are_refused_with_an_example(raw: str) -> None:
    with pytest.raises(ValueError, match="use e.g. 512MiB"):
        parse_size_bytes(raw)
