"""Structured output and tool calls on the way to the backend: a request's grammar, checked before any call.

* `response_format` `json_object` → a grammar of any JSON object; `json_schema` → the schema compiled to a
  grammar (corral.grammar.json_schema); `grammar` → the client's own GBNF, as the reference takes it;
  `grammar_json_functions` → the reference's JSON Schema of function calls, compiled like `json_schema`.
  The GBNF goes in `PredictOptions.Grammar`, which the reference's backends read the same way.
* `tools` with `tool_choice`: the call grammar is built by the backend from `Tools` and `ToolChoice`
  (`Metadata["parallel_tool_calls"]` says whether an array of calls may come); here it is only compiled once
  (cached) so that a tool schema the compiler cannot take, or a choice naming no tool, is a 400 naming it.

A schema the compiler refuses is a 400 whose `param` is the schema path
(`response_format.json_schema.schema.properties.code.pattern`). Compiled grammars are cached by schema text.
"""

from __future__ import annotations

from typing import Any

import orjson

from corral.frontend.errors import APIError
from corral.frontend.inference.schemas import ChatCompletionRequest, _Sampling
from corral.grammar.json_schema import (
    JSON_OBJECT_GRAMMAR,
    MAX_DEPTH,
    MAX_GRAMMAR_CHARS,
    SchemaError,
    schema_grammar,
)
from corral.grammar.tool_calls import cached_call_grammar
from corral.proto import backend_pb2

INVALID = "invalid_request_error"


def _refused(exc: SchemaError, prefix: str) -> APIError:
    param = exc.dotted(prefix)
    return APIError(400, f"{param}: {exc.message}", INVALID, "invalid_schema", param)


def _json_text(value: Any, prefix: str, option: int = 0) -> str:
    """`value` as JSON text; a schema nested past orjson's 255 levels (which the body parser still reads) is a
    400 naming `prefix`, not a TypeError."""
    try:
        return orjson.dumps(value, option=option).decode()
    except TypeError:
        raise _refused(SchemaError((), f"the schema nests deeper than {MAX_DEPTH} levels"), prefix) from None


def _compiled(schema: Any, prefix: str) -> str:
    try:
        return schema_grammar(_json_text(schema, prefix, orjson.OPT_SORT_KEYS))
    except SchemaError as exc:
        raise _refused(exc, prefix) from None


def request_grammar(body: _Sampling) -> str:
    """The GBNF a request asks for ('' for none); a 400 naming the field when it cannot be built."""
    if body.response_format is None and not body.grammar and not body.grammar_json_functions:
        return ""  # the common case: three attribute reads
    chosen = [name for name in ("response_format", "grammar", "grammar_json_functions") if _asks(body, name)]
    if len(chosen) > 1:
        raise APIError(
            400,
            f"send one of {' or '.join(chosen)}: each sets the output's grammar",
            INVALID,
            "invalid_value",
            chosen[1],
        )
    fmt = body.response_format
    if fmt is not None and fmt.type == "json_object":
        return JSON_OBJECT_GRAMMAR
    if fmt is not None and fmt.type == "json_schema":
        if fmt.json_schema is None or fmt.json_schema.schema_ is None:
            raise APIError(
                400,
                "response_format of type json_schema needs json_schema.schema (the JSON Schema of the reply)",
                INVALID,
                "invalid_value",
                "response_format.json_schema.schema",
            )
        return _compiled(fmt.json_schema.schema_, "response_format.json_schema.schema")
    if body.grammar:
        if len(body.grammar) > MAX_GRAMMAR_CHARS:  # the sampler's cost grows with its alternatives, per token
            raise APIError(
                400,
                f"grammar is {len(body.grammar)} characters, more than {MAX_GRAMMAR_CHARS}; send a "
                "smaller grammar (fewer alternatives)",
                INVALID,
                "invalid_value",
                "grammar",
            )
        return body.grammar
    if body.grammar_json_functions:
        return _compiled(body.grammar_json_functions, "grammar_json_functions")
    return ""


def _asks(body: _Sampling, name: str) -> bool:
    value = getattr(body, name)
    return bool(value) and not (name == "response_format" and value.type == "text")


def offer_tools(opts: backend_pb2.PredictOptions, body: ChatCompletionRequest) -> None:
    """Client-side tools: the model may answer with tool calls, returned for the client to run."""
    choice = body.tool_choice
    if body.tools is None:
        if choice not in (None, "none"):
            raise APIError(
                400,
                "tool_choice needs tools: send the tools the model may call",
                INVALID,
                "invalid_value",
                "tool_choice",
            )
        return
    opts.Tools = _json_text([t.model_dump() for t in body.tools], "tools")
    if choice is not None:
        opts.ToolChoice = choice if isinstance(choice, str) else orjson.dumps(choice).decode()
    parallel = bool(body.parallel_tool_calls)  # absent: one call at a time (a small model repeats calls)
    if parallel:
        opts.Metadata["parallel_tool_calls"] = "true"
    if opts.ToolChoice == "none" or not body.tools:
        return
    if opts.Grammar:
        raise APIError(
            400,
            "response_format, grammar and grammar_json_functions cannot be combined with tools "
            "yet (tool calls have their own grammar); send tool_choice none, or leave them out",
            INVALID,
            "invalid_value",
            "tool_choice",
        )
    try:
        cached_call_grammar(opts.Tools, opts.ToolChoice, parallel)
    except SchemaError as exc:
        raise _refused(exc, "tools") from None
    except ValueError as exc:
        raise APIError(400, str(exc), INVALID, "invalid_value", "tool_choice") from None
