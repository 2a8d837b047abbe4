"""Tool calls between OpenAI bodies and the backend protocol."""

from __future__ import annotations

import orjson

from corral.agents.loop import ToolCall
from corral.frontend.inference.tool_calls import (
    delta_tool_calls,
    openai_tool_calls,
    proto_message,
    reply_tool_calls,
)
from corral.proto import backend_pb2


def reply(*pieces: tuple[int, str, str, str]) -> backend_pb2.Reply:
    deltas = [
        backend_pb2.ChatDelta(tool_calls=[backend_pb2.ToolCallDelta(index=i, id=c, name=n, arguments=a)])
        for i, c, n, a in pieces
    ]
    return backend_pb2.Reply(chat_deltas=deltas)


def test_a_plain_message_keeps_role_content_and_name() -> None:
    out = proto_message({"role": "user", "content": "hi", "name": "ann"})
    assert (out.role, out.content, out.name, out.tool_call_id, out.tool_calls) == (
        "user",
        "hi",
        "ann",
        "",
        "",
    )


def test_missing_or_null_fields_become_empty_strings() -> None:
    out = proto_message({"role": "assistant", "content": None})
    assert (out.role, out.content, out.name) == ("assistant", "", "")
    assert proto_message({}).role == ""


def test_a_tool_result_carries_its_call_id_and_a_call_carries_its_calls_as_json() -> None:
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    assert proto_message({"role": "tool", "content": "42", "tool_call_id": "c1"}).tool_call_id == "c1"
    out = proto_message({"role": "assistant", "content": "", "tool_calls": calls})
    assert orjson.loads(out.tool_calls) == calls


def test_streamed_pieces_of_one_call_merge_by_index() -> None:
    merged = reply_tool_calls(
        reply((0, "c0", "get_weather", '{"city":'), (1, "c1", "get_time", ""), (0, "", "", ' "Paris"}'))
    )
    assert merged == [
        ToolCall(id="c0", name="get_weather", arguments='{"city": "Paris"}'),
        ToolCall(id="c1", name="get_time", arguments="{}"),  # no argument text: an empty object
    ]


def test_a_call_without_an_id_gets_one_by_its_index_and_calls_come_in_index_order() -> None:
    merged = reply_tool_calls(reply((3, "", "b", "{}"), (1, "", "a", "{}")))
    assert [(c.id, c.name) for c in merged] == [("call_1", "a"), ("call_3", "b")]


def test_the_first_id_and_name_of_a_call_stay() -> None:
    merged = reply_tool_calls(reply((0, "first", "f", ""), (0, "second", "g", "")))
    assert (merged[0].id, merged[0].name) == ("first", "f")


def test_a_reply_without_deltas_has_no_calls() -> None:
    assert reply_tool_calls(backend_pb2.Reply()) == []
    assert delta_tool_calls(backend_pb2.Reply()) == []


def test_stream_deltas_carry_id_type_and_name_only_on_a_calls_first_piece() -> None:
    assert delta_tool_calls(reply((0, "c0", "f", '{"a"'), (0, "", "", ": 1}"))) == [
        {"index": 0, "id": "c0", "type": "function", "function": {"name": "f", "arguments": '{"a"'}},
        {"index": 0, "function": {"arguments": ": 1}"}},
    ]


def test_calls_render_in_the_openai_shape() -> None:
    assert openai_tool_calls([ToolCall(id="c", name="f", arguments="{}")]) == [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    ]
    assert openai_tool_calls([]) == []
