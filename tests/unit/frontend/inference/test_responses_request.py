"""A Responses request as the chat request it runs as: input items → chat messages, tools, tool_choice."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from corral.frontend.errors import APIError
from corral.frontend.inference.responses_request import (
    ResponsesRequest,
    chat_body,
    chat_tool_choice,
    chat_tools,
    check_nesting,
    input_messages,
)
from corral.frontend.inference.schemas import ChatCompletionRequest


def _refused(value: Any, **kwargs: Any) -> APIError:
    with pytest.raises(APIError) as caught:
        input_messages(value, **kwargs)
    assert caught.value.status == 400
    return caught.value


def test_a_string_is_one_user_message_and_an_empty_one_none() -> None:
    assert input_messages("hi") == [{"role": "user", "content": "hi"}]
    assert input_messages("") == []


def test_message_items_of_every_role_and_their_text_parts_joined() -> None:
    assert input_messages(
        [
            {"role": "developer", "content": "be brief"},
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}],
            },
            {
                "type": "message",
                "role": "assistant",
                "id": "msg_1",
                "status": "completed",
                "content": [
                    {"type": "output_text", "text": "c", "annotations": []},
                    {"type": "refusal", "refusal": "d"},
                ],
            },
            {"role": "system", "content": "s"},
        ]
    ) == [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": "ab"},
        {"role": "assistant", "content": "cd"},
        {"role": "system", "content": "s"},
    ]


def test_function_calls_join_the_assistant_turn_and_outputs_become_tool_messages_named_by_call_id() -> None:
    messages = input_messages(
        [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": "checking"},
            {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": '{"city":"Oslo"}'},
            {"type": "function_call", "call_id": "c2", "name": "time", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c2", "output": "noon"},
            {
                "type": "function_call_output",
                "call_id": "c1",
                "output": [{"type": "input_text", "text": "snow"}],
            },
        ]
    )
    assert messages == [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": "checking",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
                },
                {"id": "c2", "type": "function", "function": {"name": "time", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c2", "name": "time", "content": "noon"},
        {"role": "tool", "tool_call_id": "c1", "name": "weather", "content": "snow"},
    ]


def test_a_function_call_without_text_before_it_is_its_own_assistant_message() -> None:
    [message] = input_messages([{"type": "function_call", "call_id": "c", "name": "f"}])
    assert message == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": ""}}],
    }


def test_an_output_answers_a_call_of_the_earlier_conversation_by_its_name() -> None:
    history = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c9", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
            ],
        }
    ]
    [message] = input_messages([{"type": "function_call_output", "call_id": "c9", "output": "42"}], history)
    assert message["name"] == "lookup"
    [unknown] = input_messages([{"type": "function_call_output", "call_id": "zz", "output": "42"}], history)
    assert unknown["name"] == ""


@pytest.mark.parametrize(
    "items, param, code",
    [
        (
            [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}],
            "input[0].content[0].type",
            "unsupported_value",
        ),
        (
            [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}],
            "input[0].content[0].type",
            "unsupported_value",
        ),
        (
            [{"role": "user", "content": [{"text": "no type"}]}],
            "input[0].content[0].type",
            "unsupported_value",
        ),
        ([{"type": "reasoning", "summary": []}], "input[0].type", "unsupported_value"),
        ([{"type": "item_reference", "id": "x"}], "input[0].type", "unsupported_value"),
        (["text"], "input[0]", "invalid_value"),
        ([{"role": "tool", "content": "x"}], "input[0].role", "invalid_value"),
        ([{"role": "user", "content": 5}], "input[0].content", "invalid_value"),
        (
            [{"role": "user", "content": "ok"}, {"type": "function_call", "name": "f"}],
            "input[1].call_id",
            "invalid_value",
        ),
        ([{"type": "function_call", "call_id": "c", "name": ""}], "input[0].name", "invalid_value"),
        ([{"type": "function_call", "call_id": "c", "name": "f" * 256}], "input[0].name", "invalid_value"),
        ([{"type": "function_call_output", "call_id": "c", "output": 3}], "input[0].output", "invalid_value"),
        (
            [{"role": "user", "content": [{"type": "input_text", "text": 3}]}],
            "input[0].content[0].text",
            "invalid_value",
        ),
    ],
)
def test_what_corral_cannot_read_is_a_400_naming_where_it_is(items: list[Any], param: str, code: str) -> None:
    error = _refused(items)
    assert (error.param, error.code) == (param, code)
    assert param in error.message


def test_function_tools_take_the_chat_shape_and_built_in_tools_are_refused() -> None:
    assert chat_tools(
        [{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True}]
    ) == [
        {"type": "function", "function": {"name": "f", "description": "", "parameters": {"type": "object"}}}
    ]
    for tool, param in [
        ({"type": "web_search"}, "tools[1].type"),
        ({"type": "function"}, "tools[1].name"),
        ({"type": "function", "name": "g", "parameters": []}, "tools[1].parameters"),
        ("x", "tools[1].type"),
    ]:
        with pytest.raises(APIError) as caught:
            chat_tools([{"type": "function", "name": "f"}, tool])
        assert caught.value.param == param


def test_tool_choice_takes_the_chat_shape() -> None:
    assert [chat_tool_choice(c) for c in (None, "none", "auto", "required")] == [
        None,
        "none",
        "auto",
        "required",
    ]
    assert chat_tool_choice({"type": "function", "name": "f"}) == {
        "type": "function",
        "function": {"name": "f"},
    }
    with pytest.raises(APIError) as caught:
        chat_tool_choice({"type": "file_search"})
    assert caught.value.param == "tool_choice.type"


def test_the_chat_body_puts_instructions_first_and_carries_the_sampling_fields() -> None:
    body = ResponsesRequest.model_validate(
        {
            "model": "m",
            "input": "x",
            "instructions": "rules",
            "max_output_tokens": 7,
            "temperature": 0.5,
            "top_p": 0.9,
            "tools": [{"type": "function", "name": "f"}],
            "tool_choice": {"type": "function", "name": "f"},
        }
    )
    chat = ChatCompletionRequest.model_validate(chat_body(body, [{"role": "user", "content": "x"}]))
    assert [(m.role, m.content) for m in chat.messages] == [("system", "rules"), ("user", "x")]
    assert (chat.max_output_tokens(), chat.temperature, chat.top_p) == (7, 0.5, 0.9)
    assert chat.tools is not None and chat.tools[0].function.name == "f"
    assert chat.tool_choice == {"type": "function", "function": {"name": "f"}}


@pytest.mark.parametrize(
    "field, value",
    [
        ("reasoning", {"effort": "low"}),
        ("background", True),
        ("text", {"format": {"type": "json_object"}}),
        ("include", ["x"]),
        ("nonsense", 1),
    ],
)
def test_the_request_refuses_what_it_does_not_implement_by_name(field: str, value: Any) -> None:
    with pytest.raises(ValidationError) as caught:
        ResponsesRequest.model_validate({"model": "m", "input": "x", field: value})
    assert caught.value.errors()[0]["ctx"]["param"] == field


def test_the_off_values_sdks_send_pass() -> None:
    ResponsesRequest.model_validate(
        {
            "model": "m",
            "input": "x",
            "text": {"format": {"type": "text"}},
            "truncation": "disabled",
            "parallel_tool_calls": True,
            "background": False,
            "include": [],
            "reasoning": None,
            "user": "u",
            "stream_options": {},
        }
    )


def test_a_body_nested_past_what_a_stored_response_can_hold_is_refused_naming_where() -> None:
    deep: Any = 1
    for _ in range(300):  # parsed (orjson reads 1024 levels) but not storable (it writes 255)
        deep = {"a": deep}
    with pytest.raises(APIError) as caught:
        check_nesting({"model": "m", "input": [{"role": "user", "content": "hi", "x": deep}]})
    assert caught.value.status == 400 and (caught.value.param or "").startswith("input[0].x.a.a")
    assert "nests deeper than 200 levels" in caught.value.message
    shallow: Any = 1
    for _ in range(190):
        shallow = {"a": shallow}
    check_nesting({"model": "m", "input": [{"role": "user", "content": "hi", "x": shallow}] * 2})
