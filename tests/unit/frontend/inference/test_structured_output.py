"""A request's grammar and tools on the way to the backend: what goes in PredictOptions, and the 400 (naming
the field, or the schema path) for what cannot be built."""

from __future__ import annotations

from typing import Any

import pytest

from corral.frontend.errors import APIError
from corral.frontend.inference.schemas import ChatCompletionRequest, CompletionRequest
from corral.frontend.inference.structured_output import offer_tools, request_grammar
from corral.grammar.json_schema import JSON_OBJECT_GRAMMAR, MAX_GRAMMAR_CHARS
from corral.proto import backend_pb2

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
TOOL = {"type": "function", "function": {"name": "f", "parameters": SCHEMA}}


def chat(**fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({**CHAT, **fields})


def api_error(call: Any) -> APIError:
    with pytest.raises(APIError) as caught:
        call()
    assert caught.value.status == 400
    return caught.value


def test_each_grammar_field_becomes_gbnf() -> None:
    assert request_grammar(chat()) == ""
    assert request_grammar(chat(response_format={"type": "text"})) == ""
    assert request_grammar(chat(response_format={"type": "json_object"})) == JSON_OBJECT_GRAMMAR
    schema = request_grammar(
        chat(
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": SCHEMA, "strict": True},
            }
        )
    )
    assert schema.startswith("root ::= schema\n") and '"\\"ok\\""' in schema
    assert request_grammar(chat(grammar='root ::= "yes"')) == 'root ::= "yes"'
    assert request_grammar(chat(grammar_json_functions={"oneOf": [SCHEMA]})).startswith("root ::= ")
    completion = CompletionRequest.model_validate(
        {"model": "m", "prompt": "p", "response_format": {"type": "json_object"}}
    )
    assert request_grammar(completion) == JSON_OBJECT_GRAMMAR


def test_a_refused_schema_names_its_path_and_two_grammar_fields_are_refused() -> None:
    bad = {"type": "object", "properties": {"id": {"type": "string", "format": "email"}}}
    error = api_error(
        lambda: request_grammar(
            chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": bad}})
        )
    )
    assert error.param == "response_format.json_schema.schema.properties.id.format"
    assert error.message.startswith(f"{error.param}: string format 'email' is not supported")
    error = api_error(
        lambda: request_grammar(chat(response_format={"type": "json_schema", "json_schema": {"name": "x"}}))
    )
    assert error.param == "response_format.json_schema.schema"
    error = api_error(
        lambda: request_grammar(chat(response_format={"type": "json_object"}, grammar="root ::= x"))
    )
    assert error.param == "grammar"
    error = api_error(
        lambda: request_grammar(chat(grammar_json_functions={"type": "string", "pattern": "a"}))
    )
    assert error.param == "grammar_json_functions.pattern"


def test_tools_go_to_the_backend_with_the_choice_and_parallel_only_when_asked() -> None:
    opts = backend_pb2.PredictOptions()
    offer_tools(opts, chat(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "f"}}))
    assert (
        '"name":"f"' in opts.Tools
        and '"name":"f"' in opts.ToolChoice
        and "parallel_tool_calls" not in opts.Metadata
    )
    opts = backend_pb2.PredictOptions()
    offer_tools(opts, chat(tools=[TOOL], tool_choice="required", parallel_tool_calls=True))
    assert opts.ToolChoice == "required" and opts.Metadata["parallel_tool_calls"] == "true"
    opts = backend_pb2.PredictOptions()
    offer_tools(opts, chat())
    assert not opts.Tools


def test_tool_errors_name_the_field() -> None:
    opts = backend_pb2.PredictOptions
    assert api_error(lambda: offer_tools(opts(), chat(tool_choice="required"))).param == "tool_choice"
    named = {"type": "function", "function": {"name": "g"}}
    assert (
        api_error(lambda: offer_tools(opts(), chat(tools=[TOOL], tool_choice=named))).param == "tool_choice"
    )
    bad = {"type": "function", "function": {"name": "b", "parameters": {"type": "integer", "maximum": 3}}}
    error = api_error(lambda: offer_tools(opts(), chat(tools=[TOOL, bad])))
    assert error.param == "tools[1].function.parameters.maximum"
    error = api_error(lambda: offer_tools(opts(Grammar="root ::= x"), chat(tools=[TOOL])))
    assert error.param == "tool_choice" and "cannot be combined with tools" in error.message
    offer_tools(opts(Grammar="root ::= x"), chat(tools=[TOOL], tool_choice="none"))  # no call grammar: fine


def test_a_schema_nested_past_the_json_encoder_is_a_400_naming_it() -> None:
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(300):  # the body parser reads 1024 levels, orjson writes 255
        deep = {"type": "object", "properties": {"a": deep}}
    error = api_error(
        lambda: request_grammar(
            chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": deep}})
        )
    )
    assert error.param == "response_format.json_schema.schema" and "nests deeper than" in error.message
    assert (
        api_error(lambda: request_grammar(chat(grammar_json_functions=deep))).param
        == "grammar_json_functions"
    )
    tools = [{"type": "function", "function": {"name": "f", "parameters": deep}}]
    for request in (chat(tools=tools, tool_choice=choice) for choice in ("none", "auto", "required")):
        assert api_error(lambda: offer_tools(backend_pb2.PredictOptions(), request)).param == "tools"  # noqa: B023


def test_a_raw_grammar_is_bounded_as_a_compiled_one() -> None:
    # 60,000 alternatives (600 kB) kept a llama.cpp backend busy for minutes on its first token
    huge = "root ::= " + " | ".join(f'"w{i}"' for i in range(MAX_GRAMMAR_CHARS // 8))
    error = api_error(lambda: request_grammar(chat(grammar=huge)))
    assert error.param == "grammar" and f"more than {MAX_GRAMMAR_CHARS}" in error.message
    fits = huge[:MAX_GRAMMAR_CHARS].rsplit(" | ", 1)[0]
    assert request_grammar(chat(grammar=fits)) == fits
