"""What the Files API keeps of a client's filename (frontend/inference/files.py): metadata only, never a path."""

from __future__ import annotations

import pytest

from corral.frontend.inference.files import clean_filename, known_id


@pytest.mark.parametrize(
    "raw, kept",
    [
        ("requests.jsonl", "requests.jsonl"),
        ("../../etc/passwd", "passwd"),
        ("C:\\Users\\me\\in.jsonl", "in.jsonl"),
        ("a\x00b\x1b[31mc\n", "ab[31mc"),  # control characters go
        ("..", "upload"),
        ("", "upload"),
        (None, "upload"),
        ("\ud800x", "x"),  # a lone surrogate (not UTF-8) goes too
        ("é" * 300, "é" * 255),  # bounded in characters
    ],
)
def test_a_filename_is_its_last_part_printable_and_bounded(raw: str | None, kept: str) -> None:
    assert clean_filename(raw) == kept


@pytest.mark.parametrize(
    "value, known",
    [
        ("file-0123abcd", True),
        ("batch_ab", True),
        ("a/b", False),
        ("x\x00", False),
        ("", False),
        ("f" * 65, False),
    ],
)
def test_only_ids_of_our_shape_are_looked_up(value: str, known: bool) -> None:
    assert known_id(value) is known
