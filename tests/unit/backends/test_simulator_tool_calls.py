"""The simulator's deterministic tool-call mode."""

from __future__ import annotations

import json

from corral.backends.simulator import SimulatorEngine
from corral.proto import backend_pb2 as pb

TOOLS = json.dumps(
    [{"type": "function", "function": {"name": n, "parameters": {}}} for n in ("add", "whoami")]
)


def _engine() -> SimulatorEngine:
    engine = SimulatorEngine()
    engine.load(pb.ModelOptions(Model="m"))
    return engine


def _ask(text: str, tools: str = TOOLS, choice: str = "") -> pb.Reply:
    return _engine().predict(
        pb.PredictOptions(Tools=tools, ToolChoice=choice, Messages=[pb.Message(role="user", content=text)])
    )


def test_call_phrases_naming_offered_tools_become_tool_calls_in_order() -> None:
    reply = _ask('first call add({"b": 3, "a": 2}) then call whoami and call missing({})')
    calls = [c for d in reply.chat_deltas for c in d.tool_calls]
    assert [(c.index, c.name, c.arguments) for c in calls] == [
        (0, "add", '{"a": 2, "b": 3}'),
        (1, "whoami", "{}"),
    ]
    assert reply.message == b"" and all(c.id.startswith("call_") for c in calls)
    again = [
        c.id
        for d in _ask('first call add({"b": 3, "a": 2}) then call whoami and call missing({})').chat_deltas
        for c in d.tool_calls
    ]
    assert again == [c.id for c in calls]  # deterministic


def test_no_tools_offered_no_call_phrase_or_tool_choice_none_answers_with_words() -> None:
    for reply in (
        _ask("call add({})", tools=""),
        _ask("just chat"),
        _ask("call add({})", choice="none"),
        _ask("call add(not json)", tools="[not json"),
    ):
        assert not any(d.tool_calls for d in reply.chat_deltas) and reply.message


def test_tool_results_are_quoted_in_the_answer() -> None:
    reply = _engine().predict(
        pb.PredictOptions(
            Tools=TOOLS,
            Messages=[
                pb.Message(role="user", content="call add"),
                pb.Message(role="assistant", content=""),
                pb.Message(role="tool", name="add", content="5"),
                pb.Message(role="tool", tool_call_id="c2", content="x y"),
            ],
        )
    )
    assert reply.message == b"Tool add returned: 5\nTool c2 returned: x y"
    streamed = b"".join(
        r.message
        for r in _engine().predict_stream(
            pb.PredictOptions(Messages=[pb.Message(role="tool", name="add", content="5")])
        )
    )
    assert streamed == b"Tool add returned: 5"
