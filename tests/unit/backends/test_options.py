"""Parsing of a backend's `ModelOptions.Options` entries."""

from __future__ import annotations

import pytest

from corral.backends.options import (
    OptionError,
    option_bool,
    option_float,
    option_int,
    parse_options,
    unknown_options,
)


def test_options_split_on_the_first_colon_so_values_may_contain_colons() -> None:
    assert parse_options(["load_fail:disk on fire: sector 7", "chat_format:gemma"]) == {
        "load_fail": "disk on fire: sector 7",
        "chat_format": "gemma",
    }


def test_keys_and_values_are_stripped_and_blank_entries_are_skipped() -> None:
    assert parse_options(["  load_time_s : 1.5 ", "", "   "]) == {"load_time_s": "1.5"}


def test_an_entry_without_a_colon_is_a_true_flag() -> None:
    assert parse_options(["use_jinja"]) == {"use_jinja": "true"}


def test_a_repeated_key_keeps_its_last_value() -> None:
    assert parse_options(["a:1", "a:2"]) == {"a": "2"}


def test_an_entry_with_an_empty_key_is_rejected_with_the_expected_shape() -> None:
    with pytest.raises(OptionError, match="key:value"):
        parse_options([":oops"])


def test_number_options_fall_back_to_the_default_when_absent_or_empty() -> None:
    assert option_float({}, "load_time_s", 0.25) == 0.25
    assert option_float({"load_time_s": ""}, "load_time_s", 0.25) == 0.25
    assert option_int({}, "embedding_dim", 384) == 384


def test_number_options_parse_numbers() -> None:
    assert option_float({"load_time_s": "1.5"}, "load_time_s", 0.0) == 1.5
    assert option_int({"embedding_dim": "8"}, "embedding_dim", 384, min_value=1) == 8


@pytest.mark.parametrize("raw", ["abc", "nan", "inf", "-1"])
def test_bad_seconds_values_are_rejected_naming_the_option(raw: str) -> None:
    with pytest.raises(OptionError, match="load_time_s"):
        option_float({"load_time_s": raw}, "load_time_s", 0.0)


@pytest.mark.parametrize("raw", ["1.5", "x", "0"])
def test_bad_whole_number_values_are_rejected_naming_the_option(raw: str) -> None:
    with pytest.raises(OptionError, match="embedding_dim"):
        option_int({"embedding_dim": raw}, "embedding_dim", 384, min_value=1)


@pytest.mark.parametrize(("raw", "expected"), [("true", True), ("ON", True), ("1", True), ("no", False)])
def test_bool_options_accept_the_usual_words(raw: str, expected: bool) -> None:
    assert option_bool({"flag": raw}, "flag", not expected) is expected


def test_bool_options_reject_other_words() -> None:
    with pytest.raises(OptionError, match="true or false"):
        option_bool({"flag": "maybe"}, "flag", False)


def test_unknown_options_are_listed_sorted() -> None:
    assert unknown_options({"b": "1", "a": "2", "known": "3"}, ["known"]) == ["a", "b"]


def test_cache_prompt_is_true_exact_or_false() -> None:
    pytest.importorskip("llama_cpp")
    from corral.backends.llama_cpp import _cache_prompt_mode

    assert _cache_prompt_mode({}) == "true"
    assert [_cache_prompt_mode({"cache_prompt": v}) for v in ("yes", "Exact", "0", "off")] == [
        "true",
        "exact",
        "false",
        "false",
    ]
    with pytest.raises(OptionError, match="true, exact or false, got 'maybe'"):
        _cache_prompt_mode({"cache_prompt": "maybe"})
