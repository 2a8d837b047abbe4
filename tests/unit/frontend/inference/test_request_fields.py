"""Request fields: the model's pass, harmless ones pass unread, not-yet ones are refused by name unless null
or off, unknown ones are refused by name; a message's non-text content part is refused by its place."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from pydantic import BaseModel, ValidationError

from corral.frontend.errors import validation_response
from corral.frontend.inference import request_fields
from corral.frontend.inference.request_fields import FieldPolicy
from corral.frontend.inference.schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    RerankRequest,
)

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
BODIES: list[tuple[type[BaseModel], FieldPolicy, dict[str, Any]]] = [
    (ChatCompletionRequest, request_fields.CHAT, CHAT),
    (CompletionRequest, request_fields.COMPLETIONS, {"model": "m", "prompt": "p"}),
    (EmbeddingRequest, request_fields.EMBEDDINGS, {"model": "m", "input": "x"}),
    (RerankRequest, request_fields.RERANK, {"model": "m", "query": "q", "documents": ["a"]}),
]


def error(model: type[BaseModel], body: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(body)
    response = validation_response(caught.value)
    assert response.status_code == 400
    return dict(orjson.loads(response.body)["error"])


@pytest.mark.parametrize("model, policy, body", BODIES)
def test_every_not_yet_field_passes_when_null_or_off_and_is_refused_by_name_otherwise(
    model: type[BaseModel], policy: FieldPolicy, body: dict[str, Any]
) -> None:
    for name, off in policy.not_yet.items():
        for value in (None, *off):
            model.model_validate({**body, name: value})
        found = error(model, {**body, name: "on"})  # no field's "off" value is this string
        assert (found["code"], found["param"]) == ("unsupported_parameter", name)
        assert found["message"].startswith(f"invalid request: field '{name}': corral does not support it yet")


@pytest.mark.parametrize("model, policy, body", BODIES)
def test_harmless_fields_pass_and_unknown_ones_are_refused_by_name(
    model: type[BaseModel], policy: FieldPolicy, body: dict[str, Any]
) -> None:
    for name in policy.harmless:
        model.model_validate({**body, name: {"anything": 1}})
    found = error(model, {**body, "max_tokenz": 5})
    assert (found["code"], found["param"]) == ("unknown_parameter", "max_tokenz")
    assert found["message"].startswith(
        f"invalid request: field 'max_tokenz': unknown field; check its spelling ({policy.endpoint} reads "
    )


@pytest.mark.parametrize("value", [True, 1.0, "1"])  # true is not 1; 1.0 is
def test_an_off_value_matches_by_value_and_kind(value: Any) -> None:
    body = {"model": "m", "prompt": "p", "best_of": value}
    if value == 1.0 and not isinstance(value, bool):
        CompletionRequest.model_validate(body)
    else:
        assert error(CompletionRequest, body)["param"] == "best_of"


def test_the_off_values_are_named_in_the_message() -> None:
    assert error(ChatCompletionRequest, {**CHAT, "service_tier": "flex"})["message"] == (
        "invalid request: field 'service_tier': corral does not support it yet; leave it out or send null or "
        '"auto" or "default"'
    )


def test_a_long_unknown_field_name_is_clipped() -> None:
    found = error(ChatCompletionRequest, {**CHAT, "k" * 10_000: 1})
    assert found["param"] == "k" * 40 + "…" and len(found["message"]) < 1000


@pytest.mark.parametrize("kind", ["input_audio", "file", "refusal", "video_url"])
def test_a_content_part_that_is_neither_text_nor_an_image_is_refused_by_its_place(kind: str) -> None:
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": kind, kind: {"url": "x"}}]},
    ]
    found = error(ChatCompletionRequest, {**CHAT, "messages": messages})
    assert (found["code"], found["param"]) == ("unsupported_value", "messages[1].content[1].type")
    assert found["message"] == (
        f"invalid request: field 'messages[1].content[1].type': corral does not support "
        f"{kind!r} content parts yet; send text and image_url parts only"
    )


def test_text_parts_pass_and_are_read_in_order() -> None:
    body = ChatCompletionRequest.model_validate(
        {
            **CHAT,
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
            ],
        }
    )
    assert body.messages[0].text() == "ab"


def test_a_field_both_implemented_and_refused_is_an_error_at_definition() -> None:
    policy = FieldPolicy("/v1/x", not_yet={"seed": ()})
    with pytest.raises(TypeError, match="seed implemented and refused as not yet"):
        policy.accepted(["model", "seed"])
