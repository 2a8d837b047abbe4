"""Server-sent events of one completion stream, encoded cheaply.

The JSON around a token is the same for every chunk of a stream, so it is encoded once; a token
costs one `orjson.dumps` of its text and two concatenations (the relay's per-token budget is µs).
"""

from __future__ import annotations

from typing import Any

import orjson

DONE = b"data: [DONE]\n\n"


def sse(payload: Any) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


class ChunkEncoder:
    """`chat.completion.chunk` / `text_completion` events for one stream."""

    def __init__(self, ident: str, created: int, model: str, *, chat: bool) -> None:
        self.chat = chat
        self.head: dict[str, Any] = {
            "id": ident,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": created,
            "model": model,
        }
        opening = b"data: " + orjson.dumps(self.head)[:-1]  # the object without its closing brace
        tail = b',"logprobs":null,"finish_reason":null}]}\n\n'
        if chat:
            self._prefix, self._suffix = opening + b',"choices":[{"index":0,"delta":{"content":', b"}" + tail
        else:
            self._prefix, self._suffix = opening + b',"choices":[{"index":0,"text":', tail

    def piece(self, text: bytes) -> bytes:
        """The event carrying generated text (UTF-8 bytes from the backend)."""
        return self._prefix + orjson.dumps(text.decode(errors="replace")) + self._suffix

    def chunk(self, finish: str | None, *, role: bool = False) -> dict[str, Any]:
        """A chunk without text: the opening role chunk (chat) or the final one with its finish reason."""
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": "", "logprobs": None, "finish_reason": finish}
        return {**self.head, "choices": [choice]}

    def tool_calls(self, deltas: list[dict[str, Any]]) -> dict[str, Any]:
        """A chunk carrying tool-call deltas (OpenAI `delta.tool_calls`, each with its index in the stream)."""
        delta = {"tool_calls": deltas}
        return {
            **self.head,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}],
        }

    def usage(self, usage: dict[str, int]) -> bytes:
        return sse({**self.head, "choices": [], "usage": usage})
