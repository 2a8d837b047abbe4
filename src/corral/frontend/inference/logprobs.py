"""Logprobs as OpenAI returns them, from the backends' `Reply.logprobs` (JSON in OpenAI's chat shape:
`{"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}`).

Chat takes the entries as they are (`choices[].logprobs.content`); completions take them as parallel
lists (`tokens`, `token_logprobs`, `top_logprobs` as {token: logprob}, `text_offset` counted in characters
from the start of the choice's text, echoed prompt included).
"""

from __future__ import annotations

from typing import Any

import orjson

from corral.proto import backend_pb2


def entries(reply: backend_pb2.Reply) -> list[dict[str, Any]]:
    """The logprob entries a reply carries (none when it carries none)."""
    return orjson.loads(reply.logprobs)["content"] if reply.logprobs else []


def chat(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"content": items, "refusal": None}


class CompletionLogprobs:
    """Entries in the completions shape; `offset` runs on across the pieces of one choice's text."""

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset

    def shape(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        tokens, offsets = [], []
        for item in items:
            tokens.append(item["token"])
            offsets.append(self.offset)
            self.offset += len(item["token"])
        return {
            "tokens": tokens,
            "token_logprobs": [item["logprob"] for item in items],
            "top_logprobs": [
                {alt["token"]: alt["logprob"] for alt in item.get("top_logprobs", [])} for item in items
            ],
            "text_offset": offsets,
        }
