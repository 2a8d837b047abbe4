"""A JSON body orjson refuses for text that is not valid Unicode is refused naming the field."""

from __future__ import annotations

import pytest

from corral.frontend.json_body import invalid_text_field


@pytest.mark.parametrize(
    "raw, field",
    [
        (b'{"description": "a\\ud800"}', "description"),  # a lone high surrogate escape
        (b'{"p": {"q": ["ok", "\\udc00"]}}', "p.q.1"),  # a lone low one
        (b'{"zone\\ud800": "a"}', "zone\\ud800"),  # in a key
        (b'{"x": "\xff"}', "x"),  # a byte that is not UTF-8
        (b'{"x": "\xed\xa0\x80"}', "x"),  # a surrogate encoded as UTF-8 bytes
    ],
)
def test_the_field_with_invalid_text_is_found(raw: bytes, field: str) -> None:
    assert invalid_text_field(raw) == field


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": ',  # malformed: not a text problem
        b"[" * 100_000,  # deeper than the standard library recurses
        b'{"a": "\\ud83d\\ude00"}',  # a complete pair is valid text
    ],
)
def test_other_bodies_are_not_a_text_problem(raw: bytes) -> None:
    assert invalid_text_field(raw) is None
