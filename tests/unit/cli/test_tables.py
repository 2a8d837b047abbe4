"""Plain-text tables of the CLI and the cell formatters for sizes and labels."""

from __future__ import annotations

import pytest

from corral.cli.tables import labels, size, table


def test_columns_are_padded_to_their_widest_cell_with_no_trailing_space() -> None:
    assert table(["NAME", "STATE"], [["llama", "loaded"], ["a-much-longer-name", "x"]]) == (
        "NAME                STATE\nllama               loaded\na-much-longer-name  x"
    )


def test_none_is_an_empty_cell_and_other_values_are_their_text() -> None:
    assert table(["A", "B", "C"], [[None, 3, 1.5]]) == "A  B  C\n   3  1.5"


def test_a_table_without_rows_is_its_header() -> None:
    assert table(["NAME", "STATE"], []) == "NAME  STATE"


def test_a_row_of_the_wrong_width_is_refused() -> None:
    with pytest.raises((ValueError, IndexError)):
        table(["A", "B"], [["only one"]])
    with pytest.raises(ValueError):
        table(["A"], [["one", "two"]])


def test_wide_characters_are_counted_as_characters() -> None:
    assert table(["N"], [["é"], ["ab"]]).split("\n") == ["N", "é", "ab"]


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (73_500_000_000, "73.5 GB"),
        ("2048", "2.0 kB"),
        (1, "1 B"),
        (0, "-"),
        (-5, "-"),
        (None, "-"),
        ("", "-"),
        ("lots", "-"),
        ([1], "-"),
        (2.9, "2 B"),  # a float is truncated to whole bytes
    ],
)
def test_sizes_are_readable_and_unknown_is_a_dash(value: object, shown: str) -> None:
    assert size(value) == shown


def test_labels_are_sorted_key_value_pairs_or_a_dash() -> None:
    assert labels({"zone": "eu", "gpu": "a100"}) == "gpu=a100,zone=eu"
    assert labels({}) == "-"
    assert labels(None) == "-"
    assert labels("gpu=a100") == "-"
