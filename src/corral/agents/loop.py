"""The agent loop, independent of where the model and the tools run.

The model proposes tool calls; each runs (on an agent worker), its result goes back to the model as a
`tool` message; this repeats for at most `max_iterations` model turns that call tools. A model still
calling tools after that is asked once more with tools switched off, for its final answer.
The frontend's chat path and the worker's jobs both use it, with their own model and tool callables.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as OpenAI carries it

    def openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }

    def parsed_arguments(self) -> dict[str, Any]:
        """The arguments as a mapping; text that is not a JSON object is refused (the tool gets nothing it
        cannot read)."""
        try:
            value = json.loads(self.arguments or "{}")
        except json.JSONDecodeError as exc:
            raise ValueError(f"arguments of tool {self.name!r} are not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ValueError(f"arguments of tool {self.name!r} must be a JSON object")
        return value


@dataclass
class Turn:
    """One model answer: text and/or tool calls, with token counts."""

    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "stop"


@dataclass
class LoopResult:
    final: Turn
    messages: list[dict[str, Any]]
    iterations: int
    prompt_tokens: int = 0
    completion_tokens: int = 0


ModelCall = Callable[[list[dict[str, Any]], bool], Awaitable[Turn]]  # (messages, tools allowed) -> answer
ToolRun = Callable[[ToolCall], Awaitable[str]]  # the result text; a failure comes back as error text
Event = Callable[[str, dict[str, Any]], Awaitable[None]]  # ("tool_call" | "tool_result", payload)


async def _no_event(_kind: str, _payload: dict[str, Any]) -> None:
    return None


async def run_loop(
    messages: list[dict[str, Any]],
    model: ModelCall,
    run_tool: ToolRun,
    max_iterations: int,
    on_event: Event = _no_event,
) -> LoopResult:
    history = list(messages)
    prompt = completion = 0
    for iteration in range(1, max_iterations + 2):
        tools_allowed = iteration <= max_iterations
        turn = await model(history, tools_allowed)
        prompt, completion = prompt + turn.prompt_tokens, completion + turn.completion_tokens
        if not turn.tool_calls or not tools_allowed:
            turn.tool_calls = []
            return LoopResult(turn, history, iteration, prompt, completion)
        history.append(
            {
                "role": "assistant",
                "content": turn.content,
                "tool_calls": [c.openai() for c in turn.tool_calls],
            }
        )
        for call in turn.tool_calls:
            await on_event("tool_call", call.openai())
            result = await run_tool(call)
            history.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": result})
            await on_event("tool_result", {"tool_call_id": call.id, "name": call.name, "content": result})
    raise AssertionError("unreachable: the last iteration allows no tools")
