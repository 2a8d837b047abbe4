"""JSON Schema → GBNF: the rules each schema part becomes, and the path of every part the compiler refuses.

Whether llama.cpp accepts the grammars and what a model writes under them: tests/integration/backends/
test_llama_structured.py and tests/e2e/test_structured_output.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from corral.grammar.json_schema import (
    JSON_OBJECT_GRAMMAR,
    MAX_DEPTH,
    SchemaCompiler,
    SchemaError,
    literal,
    schema_grammar,
)


def grammar(schema: Any) -> dict[str, str]:
    rules = {}
    for line in schema_grammar(json.dumps(schema)).splitlines():
        name, _, body = line.partition(" ::= ")
        rules[name] = body
    return rules


def refused(schema: Any) -> SchemaError:
    with pytest.raises(SchemaError) as caught:
        SchemaCompiler().compile(schema)
    return caught.value


def test_an_object_has_its_required_members_in_order_and_each_optional_one_may_be_left_out() -> None:
    rules = grammar(
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}, "c": {"type": "null"}},
            "required": ["a", "c"],
        }
    )
    assert rules["root"] == "schema"
    assert rules["schema"] == '"{" ws schema-a-kv ( "," ws schema-b-kv )? "," ws schema-c-kv "}" ws'
    assert rules["schema-a-kv"] == '"\\"a\\"" ws ":" ws integer'


def test_with_no_required_member_any_one_may_come_first_or_none_at_all() -> None:
    rules = grammar({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}})
    assert rules["schema"] == '"{" ws ( schema-a-kv schema-rest | schema-b-kv )? "}" ws'
    assert rules["schema-rest"] == '( "," ws schema-b-kv )?'


def test_enum_const_and_type_lists_are_alternatives_of_exact_json() -> None:
    rules = grammar(
        {
            "type": "object",
            "properties": {
                "e": {"enum": ["x", 2, None, 'q"uote']},
                "k": {"const": {"a": [1]}},
                "t": {"type": ["string", "null"]},
            },
            "required": ["e", "k", "t"],
        }
    )
    assert rules["schema-e"] == '"\\"x\\"" ws | "2" ws | "null" ws | "\\"q\\\\\\"uote\\"" ws'
    assert rules["schema-k"] == '"{\\"a\\":[1]}" ws'
    assert rules["schema-t"] == "string | null"


def test_lengths_and_item_counts_are_bounded_repetitions() -> None:
    rules = grammar(
        {
            "type": "array",
            "items": {"type": "string", "minLength": 2, "maxLength": 5},
            "minItems": 1,
            "maxItems": 3,
        }
    )
    assert rules["schema-items"] == '"\\"" char{2,5} "\\"" ws'
    assert rules["schema"] == '"[" ws schema-items ( "," ws schema-items ){0,2} "]" ws'


def test_a_recursive_ref_is_one_rule_that_names_itself() -> None:
    rules = grammar(
        {
            "$defs": {
                "node": {
                    "type": "object",
                    "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                    "required": ["kids"],
                }
            },
            "$ref": "#/$defs/node",
        }
    )
    assert rules["root"] == "ref-node"
    assert "ref-node" in rules["ref-node-kids"]
    aliases = grammar(
        {
            "$defs": {
                "a": {"$ref": "#/$defs/node"},
                "node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/a"}}},
            },
            "$ref": "#/$defs/a",
        }
    )  # a cycle through an object is a value
    assert aliases["root"] == "ref-a"


def test_json_object_and_formats_use_the_shared_primitives() -> None:
    assert JSON_OBJECT_GRAMMAR.startswith('root ::= "{" ws')
    assert grammar({"type": "string", "format": "date-time"})["root"] == "date-time-string"
    assert grammar(True)["root"] == "value" and grammar({})["root"] == "value"
    assert grammar({"type": "object", "properties": {}})["schema"] == '"{" ws "}" ws'  # no extra members


@pytest.mark.parametrize(
    "schema, path",
    [
        ({"type": "string", "pattern": "^a"}, ("pattern",)),
        ({"properties": {"n": {"type": "integer", "minimum": 0}}}, ("properties", "n", "minimum")),
        ({"type": "array", "items": {"type": "object", "not": {}}}, ("items", "not")),
        ({"anyOf": [{"type": "string"}, {"type": "string", "format": "email"}]}, ("anyOf", 1, "format")),
        ({"$ref": "#/$defs/missing"}, ("$ref",)),
        ({"$ref": "https://example.com/s.json"}, ("$ref",)),
        ({"type": "object", "properties": {"a": {"type": "wat"}}}, ("properties", "a", "type")),
        ({"allOf": [{"type": "string"}, {"maxLength": 3}]}, ("allOf",)),
        ({"type": "array", "maxItems": 1_000_000}, ("maxItems",)),
        ({"type": "string", "minLength": 4, "maxLength": 2}, ("maxLength",)),
        ({"properties": {"a": {}}, "required": ["b"]}, ("required",)),
        (
            {"type": "object", "properties": {"a": {}}, "additionalProperties": "yes"},
            ("additionalProperties",),
        ),
        ({"type": "object", "additionalProperties": None}, ("additionalProperties",)),
        ({"description": "nothing to generate"}, ()),
        (
            {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
            ("$ref",),
        ),  # llama.cpp: left recursion
        ({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, ("$ref",)),
        (
            {
                "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/c"}, "c": {"$ref": "#/$defs/b"}},
                "properties": {"x": {"$ref": "#/$defs/a"}},
            },
            ("properties", "x", "$ref"),
        ),
        (
            {"$defs": {"a": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"},
            ("$ref",),
        ),
        (
            {
                "$defs": {
                    "a": {"oneOf": [{"type": "null"}, {"allOf": [{"$ref": "#/$defs/b"}]}]},
                    "b": {"$ref": "#/$defs/a"},
                },
                "type": "object",
                "properties": {"x": {"$ref": "#/$defs/b"}},
            },
            ("properties", "x", "$ref"),
        ),
    ],
)
def test_what_the_compiler_cannot_take_is_refused_with_its_path(schema: Any, path: tuple[Any, ...]) -> None:
    error = refused(schema)
    assert error.path == path
    assert error.message


def test_the_path_reads_as_the_request_names_it() -> None:
    error = SchemaError(("properties", "tags", "items", 0, "pattern"), "x")
    assert error.dotted("response_format.json_schema.schema") == (
        "response_format.json_schema.schema.properties.tags.items[0].pattern"
    )


def test_nesting_deeper_than_the_bound_is_refused() -> None:
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(MAX_DEPTH + 2):
        schema = {"type": "array", "items": schema}
    assert "deeper" in refused(schema).message


def test_literals_escape_what_gbnf_would_read() -> None:
    assert literal('a"b\\c\nd\x01') == '"a\\"b\\\\c\\nd\\x01"'
    assert literal("é") == '"é"'


def test_a_schema_compiles_once_per_distinct_text() -> None:
    text = json.dumps({"type": "object", "properties": {"cached": {"type": "integer"}}})
    before = schema_grammar.cache_info().misses
    assert schema_grammar(text) is schema_grammar(text)
    assert schema_grammar.cache_info().misses == before + 1
