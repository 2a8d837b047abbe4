"""Parsing of setting values: each parser returns the value or raises ValueError with a short reason."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from corral.config.parse import (
    format_duration_s,
    parse_bool,
    parse_duration_s,
    parse_host_port,
    parse_http_url,
    parse_int,
    parse_labels,
    parse_nats_url,
    parse_non_negative_int,
    parse_optional_http_url,
    parse_optional_postgres_url,
    parse_path,
    parse_path_list,
    parse_port,
    parse_positive_duration_s,
    parse_positive_int,
    parse_postgres_url,
)


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [
        ("90s", 90.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("250ms", 0.25),
        ("1.5s", 1.5),
        (".5s", 0.5),
        ("10us", 1e-5),
        ("10µs", 1e-5),
        ("100ns", 1e-7),
        ("30", 30.0),
        (" 2.5 ", 2.5),
        ("0", 0.0),
        ("1h1h", 7200.0),  # Go adds repeated units too
        ("400d", 400 * 86400.0),  # days: beyond Go, for retentions
        ("1d12h", 129600.0),
    ],
)
def test_durations_are_go_style_or_bare_seconds(raw: str, seconds: float) -> None:
    assert parse_duration_s(raw) == pytest.approx(seconds)


@pytest.mark.parametrize("raw", ["", "   ", "5x", "m", "5 m", "1h 30m", "s5", "5m garbage", "1 d", "-5m"])
def test_what_is_not_a_duration_is_refused(raw: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration_s(raw)


@pytest.mark.parametrize("raw", ["0", "0s", "-1", "0ms"])
def test_a_positive_duration_refuses_zero_and_below(raw: str) -> None:
    with pytest.raises(ValueError, match="must be a positive duration"):
        parse_positive_duration_s(raw)


def test_a_positive_duration_refuses_nan() -> None:
    with pytest.raises(ValueError):
        parse_positive_duration_s("nan")


def test_bare_seconds_past_float_range_do_not_become_a_finite_number() -> None:
    assert math.isinf(parse_duration_s("1e400"))  # documents today's behaviour: infinite, never wrapped


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.25, "250ms"),
        (0.0, "0ms"),
        (1.0, "1s"),
        (90.0, "1m30s"),
        (3600.0, "1h"),
        (3661.0, "1h1m1s"),
        (59.6, "1m"),
    ],
)
def test_durations_format_the_way_operators_write_them(seconds: float, text: str) -> None:
    assert format_duration_s(seconds) == text


@pytest.mark.parametrize("seconds", [1.0, 90.0, 5400.0, 86_399.0])
def test_a_formatted_duration_parses_back(seconds: float) -> None:
    assert parse_duration_s(format_duration_s(seconds)) == seconds


@pytest.mark.parametrize("raw", ["1", "true", "YES", " on ", "y", "T"])
def test_true_words(raw: str) -> None:
    assert parse_bool(raw) is True


@pytest.mark.parametrize("raw", ["0", "false", "No", "off", "n", "f", "", "  "])
def test_false_words_and_blank(raw: str) -> None:
    assert parse_bool(raw) is False


@pytest.mark.parametrize("raw", ["2", "maybe", "truee", "enabled"])
def test_other_words_are_not_booleans(raw: str) -> None:
    with pytest.raises(ValueError, match="is not a boolean"):
        parse_bool(raw)


def test_integers() -> None:
    assert parse_int(" 42 ") == 42
    assert parse_int("-3") == -3
    for raw in ("", "4.0", "x", "0x10"):
        with pytest.raises(ValueError, match="is not an integer"):
            parse_int(raw)


def test_positive_and_non_negative_integers_name_their_bound() -> None:
    assert parse_positive_int("1") == 1
    assert parse_non_negative_int("0") == 0
    with pytest.raises(ValueError, match="must be a positive number"):
        parse_positive_int("0")
    with pytest.raises(ValueError, match="must be 0 or more"):
        parse_non_negative_int("-1")


@pytest.mark.parametrize(("raw", "port"), [("1", 1), ("65535", 65535), (" 8080 ", 8080)])
def test_ports_in_range(raw: str, port: int) -> None:
    assert parse_port(raw) == port


@pytest.mark.parametrize("raw", ["0", "65536", "-1", "99999999999999999999"])
def test_ports_out_of_range_are_refused(raw: str) -> None:
    with pytest.raises(ValueError, match=r"is not a TCP port \(1-65535\)"):
        parse_port(raw)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("0.0.0.0:50051", ("0.0.0.0", 50051)),
        (":8080", ("", 8080)),  # all interfaces
        ("[::1]:443", ("::1", 443)),
        (" frontend:80 ", ("frontend", 80)),
    ],
)
def test_host_port(raw: str, expected: tuple[str, int]) -> None:
    assert parse_host_port(raw) == expected


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("frontend", "is not host:port"),
        ("frontend:http", "non-numeric port"),
        ("frontend:", "non-numeric port"),
        ("frontend:0", "outside 1-65535"),
        ("frontend:65536", "outside 1-65535"),
    ],
)
def test_bad_host_port_names_what_is_wrong(raw: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_host_port(raw)


def test_postgres_urls_need_the_scheme_and_a_database() -> None:
    assert parse_postgres_url(" postgresql://u@h:5432/db ") == "postgresql://u@h:5432/db"
    assert parse_postgres_url("postgres://h/db") == "postgres://h/db"
    with pytest.raises(ValueError, match="is not a PostgreSQL URL"):
        parse_postgres_url("mysql://h/db")
    with pytest.raises(ValueError, match="names no database"):
        parse_postgres_url("postgresql://h:5432/")
    assert parse_optional_postgres_url("  ") == ""
    with pytest.raises(ValueError, match="is not a PostgreSQL URL"):
        parse_optional_postgres_url("h/db")


def test_nats_urls_are_checked_one_by_one_in_a_list() -> None:
    assert parse_nats_url("nats://a:4222,tls://b:4222") == "nats://a:4222,tls://b:4222"
    assert parse_nats_url("ws://a, wss://b") == "ws://a, wss://b"
    with pytest.raises(ValueError, match="'http://b' is not a NATS URL"):
        parse_nats_url("nats://a:4222,http://b")
    with pytest.raises(ValueError, match="is not a NATS URL"):
        parse_nats_url("")


def test_http_urls_lose_their_trailing_slash() -> None:
    assert parse_http_url(" http://frontend:8080/ ") == "http://frontend:8080"
    assert parse_http_url("https://x/api//") == "https://x/api"
    for raw in ("frontend:8080", "ftp://x", "http://", ""):
        with pytest.raises(ValueError, match="is not an http"):
            parse_http_url(raw)
    assert parse_optional_http_url("") == ""
    assert parse_optional_http_url("http://a") == "http://a"


def test_paths_expand_the_home_and_refuse_blank() -> None:
    assert parse_path(" /var/lib/corral ") == Path("/var/lib/corral")
    assert parse_path("~/models") == Path("~/models").expanduser()
    with pytest.raises(ValueError, match="empty path"):
        parse_path("  ")


def test_path_lists_split_on_commas_and_the_path_separator() -> None:
    raw = f"/a,/b{os.pathsep}/c, ,"
    assert parse_path_list(raw) == (Path("/a"), Path("/b"), Path("/c"))
    assert parse_path_list("") == ()
    with pytest.raises(ValueError, match="'relative/dir' is not an absolute path"):
        parse_path_list("/a,relative/dir")


def test_labels_are_key_value_pairs() -> None:
    assert parse_labels("gpu=a100, zone = eu ,,") == {"gpu": "a100", "zone": "eu"}
    assert parse_labels("k=") == {"k": ""}
    assert parse_labels("expr=a=b") == {"expr": "a=b"}  # only the first '=' splits
    assert parse_labels("") == {}
    for raw in ("gpu", "=a100", " =x"):
        with pytest.raises(ValueError, match="is not key=value"):
            parse_labels(raw)
