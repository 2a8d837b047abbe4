"""Logprobs from a backend reply, in the chat shape and in the completions shape."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from corral.frontend.inference.logprobs import CompletionLogprobs, chat, entries
from corral.proto import backend_pb2

ITEMS: list[dict[str, Any]] = [
    {
        "token": "Hé",
        "logprob": -0.1,
        "bytes": [72, 195, 169],
        "top_logprobs": [{"token": "Hé", "logprob": -0.1}],
    },
    {
        "token": "llo",
        "logprob": -1.5,
        "bytes": [108, 108, 111],
        "top_logprobs": [{"token": "llo", "logprob": -1.5}, {"token": "y", "logprob": -2.0}],
    },
]


def test_a_reply_without_logprobs_has_no_entries() -> None:
    assert entries(backend_pb2.Reply(message=b"x")) == []


def test_a_reply_carries_its_entries_as_sent() -> None:
    reply = backend_pb2.Reply(logprobs=orjson.dumps({"content": ITEMS}))
    assert entries(reply) == ITEMS


@pytest.mark.parametrize("raw", [b"\xff\xfe", b"{", b"[]", b"{}"])
def test_logprobs_that_are_not_the_chat_shape_raise(raw: bytes) -> None:
    with pytest.raises((ValueError, KeyError, TypeError)):
        entries(backend_pb2.Reply(logprobs=raw))


def test_chat_takes_the_entries_as_they_are() -> None:
    assert chat(ITEMS) == {"content": ITEMS, "refusal": None}


def test_completions_shape_is_parallel_lists_with_character_offsets() -> None:
    shaped = CompletionLogprobs().shape(ITEMS)
    assert shaped == {
        "tokens": ["Hé", "llo"],
        "token_logprobs": [-0.1, -1.5],
        "top_logprobs": [{"Hé": -0.1}, {"llo": -1.5, "y": -2.0}],
        "text_offset": [0, 2],  # characters, not bytes: "Hé" is 3 bytes
    }


def test_the_offset_runs_on_across_the_pieces_of_one_choice() -> None:
    shaper = CompletionLogprobs(offset=10)  # an echoed prompt of 10 characters
    assert shaper.shape(ITEMS[:1])["text_offset"] == [10]
    assert shaper.shape(ITEMS[1:])["text_offset"] == [12]
    assert shaper.offset == 15


def test_an_entry_without_alternatives_has_an_empty_top_map() -> None:
    shaped = CompletionLogprobs().shape([{"token": "a", "logprob": 0.0}])
    assert shaped["top_logprobs"] == [{}]
    assert CompletionLogprobs().shape([]) == {
        "tokens": [],
        "token_logprobs": [],
        "top_logprobs": [],
        "text_offset": [],
    }
