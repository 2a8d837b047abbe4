"""Tool calls as the model writes them: the grammar per tool_choice, and the scanner that turns streamed text
into content and OpenAI-style call deltas however the text is cut into pieces."""

from __future__ import annotations

import json
from typing import Any

import pytest

from corral.grammar.json_schema import SchemaError
from corral.grammar.tool_calls import (
    CallDelta,
    CallScanner,
    ToolMode,
    cached_call_grammar,
    call_grammar,
    calls_text,
    tool_functions,
    tool_mode,
)

WEATHER = {
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
NOOP = {"name": "noop"}
TOOLS = [{"type": "function", "function": WEATHER}, {"type": "function", "function": NOOP}]


def rules(text: str) -> dict[str, str]:
    return dict(line.split(" ::= ", 1) for line in text.splitlines())


def test_tool_choice_words_and_the_named_function() -> None:
    assert tool_mode("none") is None
    assert tool_mode("") == ToolMode("auto", parallel=True)
    assert tool_mode("required", parallel=False) == ToolMode("required", parallel=False)
    assert tool_mode('{"type": "function", "function": {"name": "noop"}}') == ToolMode(
        "function", "noop", False
    )
    with pytest.raises(ValueError, match="tool_choice must be"):
        tool_mode("sometimes")


def test_required_is_one_call_of_any_tool_and_parallel_adds_an_array_of_them() -> None:
    one = rules(call_grammar(tool_functions(TOOLS), ToolMode("required", parallel=False)))
    assert one["root"] == "call" and one["call"] == "call-0 | call-1"
    assert one["call-0"] == (
        '"{" ws "\\"name\\"" ws ":" ws "\\"get_weather\\"" ws "," ws "\\"arguments\\"" ws '
        '":" ws args-0 "}" ws'
    )
    assert one["call-1"].endswith(' object "}" ws')  # no parameters: any object
    several = rules(call_grammar(tool_functions(TOOLS), ToolMode("required", parallel=True)))
    assert several["root"] == 'call | "[" ws call ( "," ws call ){0,7} "]" ws'


def test_a_named_function_allows_only_it_and_auto_allows_text_too() -> None:
    named = rules(call_grammar(tool_functions(TOOLS), ToolMode("function", "noop", False)))
    assert named["root"] == "call" and named["call"] == "call-1" and "call-0" not in named
    auto = rules(call_grammar(tool_functions(TOOLS), ToolMode("auto", parallel=False)))
    assert auto["root"] == "call | text" and auto["text"] == r"[^{\[ \t\n] [^\x00]*"
    with pytest.raises(ValueError, match="'gone', which is not among the tools"):
        call_grammar(tool_functions(TOOLS), ToolMode("function", "gone", False))


def test_tools_without_a_function_ask_for_no_grammar() -> None:
    assert cached_call_grammar("[]", "auto", True) == ""
    assert cached_call_grammar(json.dumps([{"type": "web_search"}]), "required", False) == ""


def test_a_tool_schema_the_compiler_refuses_names_the_tool() -> None:
    bad = [
        *TOOLS,
        {"type": "function", "function": {"name": "f", "parameters": {"type": "string", "pattern": "x"}}},
    ]
    with pytest.raises(SchemaError) as caught:
        cached_call_grammar(json.dumps(bad), "auto", False)
    assert caught.value.dotted("tools") == "tools[2].function.parameters.pattern"
    assert cached_call_grammar(json.dumps(bad), "none", False) == ""  # choice none: no grammar to build


def scan(text: str, *, text_allowed: bool, step: int) -> list[str | CallDelta]:
    scanner = CallScanner(text_allowed)
    events: list[str | CallDelta] = []
    for start in range(0, len(text), step):
        events += scanner.feed(text[start : start + step])
    return events + scanner.finish()


def calls_of(events: list[str | CallDelta]) -> list[dict[str, Any]]:
    calls: dict[int, dict[str, Any]] = {}
    for event in events:
        if isinstance(event, CallDelta):
            call = calls.setdefault(event.index, {"id": event.id, "name": event.name, "arguments": ""})
            assert not event.id or event.arguments == ""  # the header carries no argument text
            call["arguments"] += event.arguments
    return [calls[i] for i in sorted(calls)]


@pytest.mark.parametrize("step", [1, 2, 3, 7, 1000])
def test_a_call_becomes_a_header_then_argument_deltas_however_the_text_is_cut(step: int) -> None:
    text = ' {"name": "get_weather", "arguments": {"city": "Pa}r\\"is", "n": [1, {"x": {}}]} } '
    events = scan(text, text_allowed=False, step=step)
    [call] = calls_of(events)
    assert call["name"] == "get_weather" and call["id"].startswith("call_") and len(call["id"]) == 29
    assert json.loads(call["arguments"]) == {"city": 'Pa}r"is', "n": [1, {"x": {}}]}
    assert not any(isinstance(e, str) for e in events)
    if step == 1:
        assert sum(isinstance(e, CallDelta) and not e.id for e in events) > 10  # streamed piece by piece


@pytest.mark.parametrize("step", [1, 4, 1000])
def test_an_array_of_calls_gives_one_call_per_element_with_its_own_id(step: int) -> None:
    text = '[{"name":"a","arguments":{"k":"["}}, {"name": "b", "arguments": {}}]'
    calls = calls_of(scan(text, text_allowed=False, step=step))
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [("a", {"k": "["}), ("b", {})]
    assert calls[0]["id"] != calls[1]["id"]


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_with_auto_text_streams_as_content_and_a_call_as_a_call(step: int) -> None:
    events = scan("  Hello {there}", text_allowed=True, step=step)
    assert "".join(e for e in events if isinstance(e, str)) == "Hello {there}"
    assert (
        calls_of(scan('{"name": "noop", "arguments": {}}', text_allowed=True, step=step))[0]["name"] == "noop"
    )


def test_text_that_holds_no_call_comes_back_as_content() -> None:
    assert scan("not a call", text_allowed=False, step=3) == ["not a call"]
    assert scan('{"nam', text_allowed=False, step=1) == ['{"nam']


def test_past_calls_are_written_back_in_the_format_the_model_writes() -> None:
    one: list[dict[str, Any]] = [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    ]
    assert json.loads(calls_text(one)) == {"name": "f", "arguments": {"a": 1}}
    two = [*one, {"function": {"name": "g", "arguments": "not json"}}]
    assert json.loads(calls_text(two)) == [
        {"name": "f", "arguments": {"a": 1}},
        {"name": "g", "arguments": "not json"},
    ]
