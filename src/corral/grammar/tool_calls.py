"""Tool calls as the model writes them: one format, its grammar, and its parser.

A call is the JSON object `{"name": <tool name>, "arguments": <object valid against that tool's parameters>}`;
several (parallel calls) are a JSON array of them. `tool_choice` decides the grammar:

* `required`: a call (or, with parallel calls, an array of 1..MAX_PARALLEL_CALLS calls);
* a named function: exactly one call to that function;
* `auto`: a call as for `required`, or free text that does not start with `{` or `[`;
* `none` (or no tools): no grammar, no parsing.

`CallScanner` reads generated text as it streams and splits it into content and call deltas (the
header — id and name — once `"arguments":` is reached, then argument text as it comes), so a streamed
call reaches the client with OpenAI's argument deltas.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from corral.grammar.json_schema import Grammar, SchemaCompiler, SchemaError, literal

MAX_PARALLEL_CALLS = 8
CHOICES = ("none", "auto", "required")


@dataclass(frozen=True)
class ToolMode:
    """How a request may call tools: `choice` is auto, required or function (`forced` names it)."""

    choice: str
    forced: str = ""
    parallel: bool = True

    @property
    def text_allowed(self) -> bool:
        return self.choice == "auto"


def tool_mode(tool_choice: str, parallel: bool = True) -> ToolMode | None:
    """The mode of a request's `ToolChoice` (a choice word or OpenAI's named-function JSON); None: no calls.

    Raises ValueError for a choice that is neither."""
    choice = tool_choice.strip() or "auto"
    if choice == "none":
        return None
    if choice in CHOICES:
        return ToolMode(choice, parallel=parallel)
    try:
        named = json.loads(choice)
        name = named["function"]["name"]
    except (ValueError, TypeError, KeyError):
        raise ValueError(
            f"tool_choice must be none, auto, required or "
            f'{{"type": "function", "function": {{"name": ...}}}}, not {choice[:80]!r}'
        ) from None
    if not isinstance(name, str) or not name:
        raise ValueError("tool_choice.function.name must be a tool's name")
    return ToolMode("function", forced=name, parallel=False)


def tool_functions(tools: list[Any]) -> list[dict[str, Any]]:
    """The `function` objects of OpenAI `tools`, in order (other tool types are skipped)."""
    out = []
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            out.append(function)
    return out


def call_grammar(functions: list[dict[str, Any]], mode: ToolMode) -> str:
    """GBNF of the calls `mode` allows ('' without any function to call); SchemaError's path starts at the
    tool's index (`[i].function.parameters...`)."""
    if not functions:
        return ""
    offered = [f for f in functions if not mode.forced or f["name"] == mode.forced]
    if not offered:
        raise ValueError(f"tool_choice names {mode.forced!r}, which is not among the tools")
    g = Grammar()
    compiler = SchemaCompiler(g)
    calls = []
    for index, function in enumerate(functions):
        if function not in offered:
            continue
        parameters = function.get("parameters") or {"type": "object"}
        try:
            arguments = compiler.compile(parameters, f"args-{index}")
        except SchemaError as exc:
            raise SchemaError((index, "function", "parameters", *exc.path), exc.message) from None
        name = literal(json.dumps(function["name"], ensure_ascii=False))
        calls.append(
            g.add(
                f"call-{index}",
                f'"{{" ws "\\"name\\"" ws ":" ws {name} ws "," ws '
                f'"\\"arguments\\"" ws ":" ws {arguments} "}}" ws',
            )
        )
    call = g.add("call", " | ".join(calls))
    alternatives = [call]
    if mode.parallel and not mode.forced:
        alternatives.append(f'"[" ws {call} ( "," ws {call} ){{0,{MAX_PARALLEL_CALLS - 1}}} "]" ws')
    if mode.text_allowed:
        alternatives.append(g.add("text", r"[^{\[ \t\n] [^\x00]*"))
    return g.text(" | ".join(alternatives))


@lru_cache(maxsize=128)
def cached_call_grammar(tools_json: str, tool_choice: str, parallel: bool) -> str:
    """`call_grammar` of a request's `Tools` JSON and `ToolChoice`, once per distinct pair."""
    mode = tool_mode(tool_choice, parallel)
    if mode is None:
        return ""
    return call_grammar(tool_functions(json.loads(tools_json)), mode)


def new_call_id() -> str:
    return "call_" + os.urandom(12).hex()


def calls_text(calls: list[dict[str, Any]]) -> str:
    """OpenAI `tool_calls` written back in the model's format (a past assistant turn in a prompt)."""
    written = []
    for call in calls:
        function = call.get("function") or {}
        arguments: Any = function.get("arguments") or "{}"
        try:
            arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
        except json.JSONDecodeError:
            pass  # not JSON: the model sees the text it was given
        written.append({"name": function.get("name", ""), "arguments": arguments})
    value: Any = written[0] if len(written) == 1 else written
    return json.dumps(value, ensure_ascii=False)


@dataclass
class CallDelta:
    """A piece of call `index`: the first carries id and name (arguments empty), the rest argument text."""

    index: int
    id: str = ""
    name: str = ""
    arguments: str = ""


_HEADER = re.compile(r'\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"arguments"\s*:\s*$')
_WS = " \t\r\n"


@dataclass
class CallScanner:
    """Splits streamed text into content (str) and CallDelta pieces; `text_allowed`: text may come instead."""

    text_allowed: bool
    _state: str = "start"
    _raw: str = ""  # everything fed in call mode (returned as text if no call is found)
    _header: str = ""
    _depth: int = 0
    _in_string: bool = False
    _escaped: bool = False
    calls: int = 0
    _current: CallDelta | None = None
    _out: list[str | CallDelta] = field(default_factory=list)

    def feed(self, text: str) -> list[str | CallDelta]:
        self._out = []
        for i, ch in enumerate(text):
            if self._state == "text":
                self._content(text[i:])
                break
            self._char(ch)
            if self._state == "text":  # decided on this character: it and the rest are content
                self._content(text[i:])
                break
        return self._out

    def finish(self) -> list[str | CallDelta]:
        """What is left at the end: call-mode text that held no call at all comes back as content."""
        if self.calls == 0 and self._current is None and self._raw.strip():
            return [self._raw]
        return []

    def _content(self, text: str) -> None:
        if text:
            self._out.append(text)

    def _argument(self, ch: str) -> None:
        last = self._out[-1] if self._out else None
        if isinstance(last, CallDelta) and not last.id and self._current is not None:
            last.arguments += ch
        elif self._current is not None:
            self._out.append(CallDelta(self._current.index, arguments=ch))

    def _char(self, ch: str) -> None:
        state = self._state
        if state == "start":
            if ch in _WS:
                self._raw += ch
                return
            if ch not in "{[" and self.text_allowed:
                self._state = "text"
                self._content(self._raw.lstrip())
                return
            state = self._state = "between"
        self._raw += ch
        if state == "between":
            if ch == "{":
                self._state, self._header = "header", ch
        elif state == "header":
            self._header += ch
            match = _HEADER.match(self._header)
            if match:
                self._current = CallDelta(self.calls, id=new_call_id(), name=json.loads(match.group(1)))
                self._out.append(self._current)
                self._state, self._depth, self._in_string, self._escaped = "args", 0, False, False
        elif state == "args":
            if self._argument_char(ch):
                self._argument(ch)
        elif ch == "}":  # state "tail": the call object's own closing brace
            self._state, self._current = "between", None
            self.calls += 1

    def _argument_char(self, ch: str) -> bool:
        """Track JSON nesting; whether `ch` belongs to the arguments (whitespace around them does not)."""
        if self._depth == 0 and ch in _WS:
            return False
        if self._in_string:
            if self._escaped:
                self._escaped = False
            elif ch == "\\":
                self._escaped = True
            elif ch == '"':
                self._in_string = False
        elif ch == '"':
            self._in_string = True
        elif ch in "{[":
            self._depth += 1
        elif ch in "}]":
            self._depth -= 1
            if self._depth == 0:
                self._state = "tail"
        return True
