"""Tools in a prompt whose template has no place for them (Gemma's built-in format drops `tool` turns and an
assistant turn without text): the tools told in the first user turn, a past call written as the model writes
it, a result as a user turn naming its function."""

from __future__ import annotations

import json

import pytest

from corral.grammar.tool_calls import ToolMode
from corral.proto import backend_pb2 as pb

llama_chat = pytest.importorskip("corral.backends.llama_chat")

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather now.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
CALL = {
    "id": "call_abc",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
}


def request(choice: str = "auto") -> pb.PredictOptions:
    return pb.PredictOptions(
        Tools=json.dumps([WEATHER]),
        ToolChoice=choice,
        Messages=[
            pb.Message(role="user", content="Weather in Oslo?"),
            pb.Message(role="assistant", content="", tool_calls=json.dumps([CALL])),
            pb.Message(role="tool", tool_call_id="call_abc", content="Sunny, 21 C"),
        ],
    )


def test_a_template_without_tools_gets_them_in_words_with_the_call_and_its_result() -> None:
    prompt = llama_chat.render_chat(llama_chat.named_formatter("gemma"), request(), ToolMode("auto")).text
    assert prompt.startswith(
        "<start_of_turn>user\nYou can call these functions:\n- get_weather: Weather now. "
        'Arguments (JSON Schema): {"type":"object","properties":{"city":{"type":"string"}}}\n'
    )
    assert prompt.endswith(
        "Weather in Oslo?<end_of_turn>\n"
        '<start_of_turn>model\n{"name": "get_weather", "arguments": {"city": "Oslo"}}<end_of_turn>\n'
        "<start_of_turn>user\nResult of get_weather: Sunny, 21 C<end_of_turn>\n"
        "<start_of_turn>model\n"
    )


def test_with_tool_choice_none_the_tools_are_not_offered_but_the_history_stays() -> None:
    prompt = llama_chat.render_chat(llama_chat.named_formatter("gemma"), request("none"), None).text
    assert "You can call" not in prompt
    assert "Result of get_weather: Sunny, 21 C" in prompt and '"arguments": {"city": "Oslo"}' in prompt


def test_a_forced_function_is_named_in_the_instructions() -> None:
    prompt = llama_chat.render_chat(
        llama_chat.named_formatter("gemma"), request(), ToolMode("function", "get_weather", False)
    ).text
    assert "Call get_weather now." in prompt


def test_a_jinja_template_that_renders_tools_gets_them_as_they_are() -> None:
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    template = (
        "{% for t in tools %}[tool {{ t.function.name }}]{% endfor %}{% for m in messages %}"
        "<{{ m.role }}>{{ m.content }}{% if m.tool_calls %}{{ m.tool_calls[0].function.name }}{% endif %}"
        "{% endfor %}"
    )
    formatter = Jinja2ChatFormatter(template=template, eos_token="", bos_token="")
    assert llama_chat.knows_tools(formatter) and not llama_chat.knows_tools(
        llama_chat.named_formatter("gemma")
    )
    prompt = llama_chat.render_chat(formatter, request(), ToolMode("auto")).text
    assert prompt == "[tool get_weather]<user>Weather in Oslo?<assistant>get_weather<tool>Sunny, 21 C"
