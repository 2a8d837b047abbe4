"""The pre-built SSE chunk encoding is byte-for-byte the JSON of the chunk object it replaces."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from corral.frontend.inference.sse import ChunkEncoder


def _event(raw: bytes) -> dict[str, Any]:
    assert raw.startswith(b"data: ") and raw.endswith(b"\n\n")
    event: dict[str, Any] = orjson.loads(raw[len(b"data: ") : -2])
    return event


@pytest.mark.parametrize(
    "text", ["hello", ' "quoted" \\ back', "line\nbreak\ttab", "ünïcödé 漢字 🙂", "\x00\x1f"]
)
def test_a_chat_piece_is_the_chunk_with_the_text_as_delta_content(text: str) -> None:
    encoder = ChunkEncoder("chatcmpl-1", 1700000000, "sim", chat=True)
    assert _event(encoder.piece(text.encode())) == {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "sim",
        "choices": [{"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None}],
    }


def test_a_completion_piece_carries_the_text() -> None:
    encoder = ChunkEncoder("cmpl-1", 5, 'm"odel', chat=False)
    assert _event(encoder.piece(b" word")) == {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 5,
        "model": 'm"odel',
        "choices": [{"index": 0, "text": " word", "logprobs": None, "finish_reason": None}],
    }


def test_invalid_utf8_from_the_backend_becomes_a_replacement_character() -> None:
    encoder = ChunkEncoder("c", 1, "m", chat=True)
    assert _event(encoder.piece(b"ok\xff"))["choices"][0]["delta"]["content"] == "ok\ufffd"


def test_the_role_and_finish_chunks_and_the_usage_event() -> None:
    encoder = ChunkEncoder("c", 1, "m", chat=True)
    assert encoder.chunk(None, role=True)["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert encoder.chunk("length")["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "length",
    }
    usage = {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
    assert _event(encoder.usage(usage)) == {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [],
        "usage": usage,
    }
