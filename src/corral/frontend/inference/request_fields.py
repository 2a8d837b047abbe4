"""Which fields each OpenAI endpoint reads, accepts without effect, or refuses: the one list.

A top-level field of a request body is one of:

* implemented: a field of the endpoint's pydantic model (`schemas`), read and honoured;
* harmless: accepted and not read, because it cannot change the answer (an end-user id, metadata);
* not yet: a documented OpenAI field, or a common vLLM / LocalAI extension, that corral does not
  implement: a 400 naming it — unless it is null or its "off" value (`logprobs: false`, `n: 1`,
  `response_format: {"type": "text"}`), which SDKs send;
* anything else: unknown, a 400 naming it, so that a typo never looks like success.

Implementing a field is adding it to the model and removing it from NOT_YET here (a field in both is
an error at import). Nested objects are not checked field by field (a message's `refusal` or
`annotations`, which SDKs echo back; a tool's `strict`), except a message's content parts: only `text` and
`image_url` parts are read, any other type is refused by name (`messages[0].content[1].type`).

Cost on the warm path: one subset test of the body's keys against a frozenset; the rest runs only
for a body with a field outside it. Errors are pydantic errors whose type is the OpenAI code and whose
context names the field (`errors.validation_message` reads both).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic_core import PydanticCustomError

from corral.frontend.errors import UNKNOWN_PARAMETER, UNSUPPORTED_PARAMETER, UNSUPPORTED_VALUE, clip


@dataclass(frozen=True)
class FieldPolicy:
    """One endpoint's fields beyond its model's: `harmless` ones pass unread; `not_yet` maps a field to the
    values that mean "off" and pass (null always does)."""

    endpoint: str
    harmless: frozenset[str] = frozenset()
    not_yet: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)

    def accepted(self, implemented: Iterable[str]) -> frozenset[str]:
        """The fields that pass without a look: the model's and the harmless ones."""
        implemented = frozenset(implemented)
        if both := sorted(implemented & self.not_yet.keys()):
            raise TypeError(
                f"{self.endpoint}: {', '.join(both)} implemented and refused as not yet; "
                "remove them from request_fields.NOT_YET"
            )
        return implemented | self.harmless

    def refuse(self, data: Mapping[str, Any], accepted: frozenset[str]) -> None:
        """Raise for the body's first field that is unknown, or not yet supported and not off."""
        for name, value in data.items():
            if name in accepted:
                continue
            off = self.not_yet.get(name)
            if off is None:
                raise _error(
                    UNKNOWN_PARAMETER,
                    clip(name),
                    f"unknown field; check its spelling ({self.endpoint} reads "
                    f"{', '.join(sorted(accepted))})",
                )
            if value is not None and not any(_same(value, o) for o in off):
                allowed = " or ".join(["null", *(orjson.dumps(o).decode() for o in off)])
                raise _error(
                    UNSUPPORTED_PARAMETER,
                    name,
                    f"corral does not support it yet; leave it out or send {allowed}",
                )


def _same(value: Any, off: Any) -> bool:
    """Equal and of the same kind: `true` is not `1`, `0` is not `false`."""
    return bool(value == off) and isinstance(value, bool) == isinstance(off, bool)


def _error(code: str, param: str, message: str) -> PydanticCustomError:
    return PydanticCustomError(code, "{message}", {"message": message, "param": param})


READ_PARTS = frozenset(
    {"text", "image_url"}
)  # an image is read by a vision model (frontend/inference/images.py)


def refuse_non_text_parts(messages: list[Any]) -> None:
    """Raise for the first content part that is neither text nor an image (audio, a file): none is read yet."""
    for i, message in enumerate(messages):
        content = message.get("content") if type(message) is dict else None
        if type(content) is not list:
            continue
        for j, part in enumerate(content):
            kind = part.get("type") if type(part) is dict else None
            if (
                isinstance(kind, str) and kind not in READ_PARTS
            ):  # a missing type: the model's validation names it
                raise _error(
                    UNSUPPORTED_VALUE,
                    f"messages[{i}].content[{j}].type",
                    f"corral does not support {clip(kind)!r} content parts yet; send text and image_url "
                    "parts only",
                )


# Values that mean "off" for fields of several endpoints.
_OFF_BOOL, _NULL_ONLY = (False,), ()

_SAMPLING_EXTENSIONS: dict[str, tuple[Any, ...]] = {  # vLLM's and LocalAI's common sampling extensions
    "top_k": (-1, 0),
    "min_p": (0,),
    "repetition_penalty": (1,),
    "repeat_penalty": (0, 1),
    "min_tokens": (0,),
    "ignore_eos": _OFF_BOOL,
    "stop_token_ids": ([],),
    "guided_json": _NULL_ONLY,
    "guided_regex": _NULL_ONLY,
    "guided_choice": _NULL_ONLY,
    "guided_grammar": _NULL_ONLY,
}

_GENERATION_NOT_YET: dict[str, tuple[Any, ...]] = {  # OpenAI's fields of both chat and completions
    "service_tier": ("auto", "default"),
    **_SAMPLING_EXTENSIONS,
}

CHAT = FieldPolicy(
    "/v1/chat/completions",
    harmless=frozenset({"user", "metadata", "prompt_cache_key", "safety_identifier"}),
    not_yet={
        **_GENERATION_NOT_YET,
        "store": _OFF_BOOL,  # nothing is stored for later retrieval
        "modalities": (["text"],),
        "audio": _NULL_ONLY,
        "prediction": _NULL_ONLY,
        "reasoning_effort": _NULL_ONLY,
        "verbosity": _NULL_ONLY,
        "web_search_options": _NULL_ONLY,
        "functions": _NULL_ONLY,  # deprecated for `tools`
        "function_call": _NULL_ONLY,
        "echo": _OFF_BOOL,  # vLLM
        "chat_template_kwargs": ({},),  # vLLM, llama.cpp server
    },
)

COMPLETIONS = FieldPolicy(
    "/v1/completions",
    harmless=frozenset({"user"}),
    not_yet={
        **_GENERATION_NOT_YET,
        "best_of": (1,),
        "suffix": ("",),
    },
)

EMBEDDINGS = FieldPolicy("/v1/embeddings", harmless=frozenset({"user"}))

RERANK = FieldPolicy("/v1/rerank")

RESPONSES = FieldPolicy(
    "/v1/responses",
    harmless=frozenset(
        {"user", "prompt_cache_key", "safety_identifier", "stream_options"}
    ),  # obfuscation padding
    not_yet={
        "text": ({"format": {"type": "text"}},),  # json_schema output: with structured output on chat
        "reasoning": _NULL_ONLY,
        "background": _OFF_BOOL,
        "include": ([],),
        "truncation": ("disabled",),
        "parallel_tool_calls": (True,),
        "max_tool_calls": _NULL_ONLY,
        "top_logprobs": (0,),
        "prompt": _NULL_ONLY,  # stored prompt templates
        "conversation": _NULL_ONLY,  # the Conversations API
        "context_management": _NULL_ONLY,
        "prompt_cache_retention": _NULL_ONLY,
        "service_tier": ("auto", "default"),
    },
)
