"""A batch's input file checked line by line (frontend/batch_input.py): good lines kept with their numbers, every
bad one an error naming its line, fed in chunks that cut lines anywhere."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from corral.frontend.batch_input import ERRORS_LISTED, InputCheck

CHAT = "/v1/chat/completions"


def _line(custom_id: str, **change: Any) -> bytes:
    line = {"custom_id": custom_id, "method": "POST", "url": CHAT, "body": {"model": "m", "messages": []}}
    return orjson.dumps({**line, **change})


def _check(content: bytes, chunk_bytes: int = 7, max_requests: int = 100) -> InputCheck:
    check = InputCheck(CHAT, max_requests)
    for start in range(0, len(content), chunk_bytes):  # chunks cut lines (and UTF-8 characters) anywhere
        check.feed(content[start : start + chunk_bytes])
    check.close()
    return check


def test_good_lines_are_kept_with_their_numbers_blank_lines_skipped_and_no_final_newline_needed() -> None:
    check = _check(_line("a") + b"\n\n" + _line("é") + b"\n" + _line("c"))
    assert not check.failed and check.model == "m"
    assert [(n, custom_id) for n, custom_id, _, _ in check.lines] == [(1, "a"), (3, "é"), (4, "c")]
    assert orjson.loads(check.lines[0][3]) == {"model": "m", "messages": []}
    assert check.total == 3 and len(check.take_lines()) == 3 and check.lines == []


def test_no_line_is_kept_after_the_first_error_or_past_the_bound() -> None:
    assert _check(b"x\n" + _line("a")).lines == []  # the batch fails: its lines are never stored
    assert len(_check(b"\n".join(_line(str(i)) for i in range(5)), max_requests=2).lines) == 2


@pytest.mark.parametrize(
    "bad, code, param",
    [
        (b"{not json", "invalid_json_line", None),
        (b"[1, 2]", "invalid_json_line", None),
        (
            b'{"custom_id": "x", "method": "POST", "url": "/v1/chat/completions"}',
            "missing_required_parameter",
            "body",
        ),
        (_line("x", extra=1), "unknown_parameter", "extra"),
        (_line("a"), "duplicate_custom_id", "custom_id"),  # line 1 used "a"
        (_line(""), "invalid_value", "custom_id"),
        (_line("a\x00"), "invalid_value", "custom_id"),  # PostgreSQL text holds no NUL
        (_line("x", body={"model": "m\x00"}), "missing_required_parameter", "body.model"),
        (_line("x", method="GET"), "invalid_value", "method"),
        (_line("x", url="/v1/embeddings"), "invalid_url", "url"),
        (_line("x", body=[]), "invalid_value", "body"),
        (_line("x", body={"messages": []}), "missing_required_parameter", "body.model"),
        (_line("x", body={"model": "m", "stream": True}), "unsupported_value", "body.stream"),
        (b'{"custom_id": "\xff"}', "invalid_json_line", None),  # not UTF-8
    ],
)
def test_a_bad_line_fails_the_batch_naming_its_line_number(bad: bytes, code: str, param: str | None) -> None:
    check = _check(_line("a") + b"\n" + bad + b"\n" + _line("b"))
    assert check.failed
    [error] = check.errors
    assert (error.line, error.code, error.param) == (2, code, param)
    assert error.message.startswith("line 2")


def test_an_empty_file_and_too_many_requests_are_errors_of_the_file() -> None:
    assert [e.code for e in _check(b"\n\n").errors] == ["empty_file"]
    too_many = _check(b"\n".join(_line(str(i)) for i in range(3)), max_requests=2)
    assert [(e.code, e.line) for e in too_many.errors] == [("too_many_requests", None)]
    assert "CORRAL_BATCH_MAX_REQUESTS" in too_many.errors[0].message


def test_errors_past_the_listed_bound_are_counted_in_the_last_one() -> None:
    check = _check(b"x\n" * (ERRORS_LISTED + 5), chunk_bytes=1000)
    assert check.errors_total == ERRORS_LISTED + 5 and len(check.errors) == ERRORS_LISTED
    assert check.errors[-1].message.endswith("(5 more errors not listed)")
    assert check.errors_obj()["object"] == "list"
