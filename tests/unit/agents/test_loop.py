"""The agent loop: tool calls run and their results go back, bounded by max_iterations."""

from __future__ import annotations

from typing import Any

import pytest

from corral.agents.jobs import parse_turn
from corral.agents.loop import ToolCall, Turn, run_loop


async def test_calls_run_results_return_and_the_last_turn_allows_no_tools() -> None:
    seen: list[tuple[int, bool]] = []
    events: list[str] = []

    async def model(history: list[dict[str, Any]], tools_allowed: bool) -> Turn:
        seen.append((len(history), tools_allowed))
        if tools_allowed:  # a model that always wants another tool
            return Turn(
                tool_calls=[ToolCall(f"c{len(seen)}", "add", '{"a": 1}')],
                prompt_tokens=2,
                completion_tokens=1,
            )
        return Turn(content="done", prompt_tokens=2, completion_tokens=1)

    async def tool(call: ToolCall) -> str:
        return f"ran {call.id} with {call.parsed_arguments()}"

    async def on_event(kind: str, payload: dict[str, Any]) -> None:
        events.append(kind)

    outcome = await run_loop([{"role": "user", "content": "go"}], model, tool, 2, on_event)
    assert outcome.final.content == "done" and outcome.iterations == 3
    assert seen == [(1, True), (3, True), (5, False)]
    assert events == ["tool_call", "tool_result"] * 2
    assert outcome.messages[2] == {
        "role": "tool",
        "tool_call_id": "c1",
        "name": "add",
        "content": "ran c1 with {'a': 1}",
    }
    assert (outcome.prompt_tokens, outcome.completion_tokens) == (6, 3)


@pytest.mark.parametrize("arguments", ["not json", "[1, 2]"])
def test_arguments_that_are_not_a_json_object_are_refused(arguments: str) -> None:
    with pytest.raises(ValueError, match="add"):
        ToolCall("c", "add", arguments).parsed_arguments()


def test_an_openai_completion_becomes_a_turn() -> None:
    turn = parse_turn(
        {
            "choices": [
                {
                    "message": {
                        "content": None,
                        "tool_calls": [{"id": "x", "function": {"name": "add", "arguments": '{"a":1}'}}],
                    },
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1},
        }
    )
    assert (
        turn.tool_calls == [ToolCall("x", "add", '{"a":1}')]
        and turn.content == ""
        and turn.prompt_tokens == 3
    )
