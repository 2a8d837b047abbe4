"""Responses API objects and stream events, checked against the official `openai` SDK's types and its stream
accumulator (the same code `client.responses.stream(...)` runs)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response, ResponseItemList, ResponseStreamEvent
from pydantic import TypeAdapter

from corral.frontend.errors import APIError
from corral.frontend.inference.responses_events import (
    Draft,
    EventWriter,
    input_items,
    items_page,
    unary_output,
)
from corral.frontend.inference.responses_request import ResponsesRequest
from corral.proto import backend_pb2

EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def _draft(**fields: Any) -> Draft:
    body = ResponsesRequest.model_validate({"model": "m", "input": "x", **fields})
    return Draft(body, "m", 1700000000, body.tools)


def _parse(raw: list[bytes]) -> list[Any]:
    """SSE bytes → the SDK's event objects (strict validation); the `event:` line must name the data's type."""
    events = []
    for chunk in raw:
        head, data = chunk.split(b"\n", 1)
        assert chunk.endswith(b"\n\n") and data.startswith(b"data: ")
        payload = orjson.loads(data[len(b"data: ") :])
        assert head == b"event: " + payload["type"].encode()
        events.append(EVENTS.validate_python(payload))
    return events


def _replay(events: list[Any]) -> Any:
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=[], text_format=omit)
    for event in events:
        state.handle_event(event)
    return state._completed_response


def _stream(
    writer: EventWriter,
    replies: list[backend_pb2.Reply],
    tools: bool = False,
    counts: tuple[int, int] = (3, 2),
    out_of_tokens: bool = False,
) -> list[Any]:
    raw = writer.start()
    for reply in replies:
        raw += writer.reply(reply, tools)
    raw += writer.close_items()
    writer.draft.finish(*counts, out_of_tokens=out_of_tokens)
    raw.append(writer.end())
    return _parse(raw)


def _text(piece: str) -> backend_pb2.Reply:
    return backend_pb2.Reply(message=piece.encode())


def _call(index: int, call_id: str = "", name: str = "", arguments: str = "") -> backend_pb2.Reply:
    return backend_pb2.Reply(
        chat_deltas=[
            backend_pb2.ChatDelta(
                tool_calls=[
                    backend_pb2.ToolCallDelta(index=index, id=call_id, name=name, arguments=arguments)
                ]
            )
        ]
    )


def test_a_unary_response_validates_as_the_sdks_response() -> None:
    draft = _draft(instructions="rules", max_output_tokens=9, metadata={"k": "v"})
    unary_output(draft, "hello", [("call_1", "f", '{"a":1}')])
    draft.finish(4, 5, out_of_tokens=False)
    response = Response.model_validate(draft.obj())
    assert response.status == "completed" and response.output_text == "hello"
    assert [item.type for item in response.output] == ["message", "function_call"]
    assert response.usage is not None and response.usage.total_tokens == 9
    assert (response.instructions, response.max_output_tokens, response.metadata) == ("rules", 9, {"k": "v"})


def test_a_unary_answer_with_no_text_and_no_call_is_one_empty_message_and_a_cut_one_is_incomplete() -> None:
    draft = _draft()
    unary_output(draft, "", [])
    draft.finish(1, 8, out_of_tokens=True)
    response = Response.model_validate(draft.obj())
    assert response.output_text == "" and response.status == "incomplete"
    assert (
        response.incomplete_details is not None and response.incomplete_details.reason == "max_output_tokens"
    )


def test_text_streams_in_openais_order_with_rising_sequence_numbers_and_the_sdk_reassembles_it() -> None:
    writer = EventWriter(_draft())
    events = _stream(writer, [_text("Hel"), _text("lo"), backend_pb2.Reply(tokens=2, prompt_tokens=3)])
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    final = _replay(events)
    assert final.output_text == "Hello" and final.id == writer.draft.id


def test_text_then_tool_calls_close_the_text_first_and_stream_each_calls_arguments() -> None:
    writer = EventWriter(_draft(tools=[{"type": "function", "name": "f"}]))
    events = _stream(
        writer,
        [
            _text("Let me check."),
            _call(0, "call_a", "f", '{"x"'),
            _call(0, arguments=": 1}"),
            _call(1, "call_b", "g", "{}"),
        ],
        tools=True,
    )
    assert [e.type for e in events][2:] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    final = _replay(events)
    assert [(i.type, getattr(i, "arguments", None)) for i in final.output] == [
        ("message", None),
        ("function_call", '{"x": 1}'),
        ("function_call", "{}"),
    ]
    assert (final.output[1].call_id, final.output[2].name) == ("call_a", "g")
    assert final.status == "completed"  # a call is an answer, even at the token budget


def test_tool_calls_are_ignored_unless_tools_were_offered_and_an_empty_stream_is_one_empty_message() -> None:
    events = _stream(EventWriter(_draft()), [_call(0, "c", "f", "{}")])
    final = _replay(events)
    assert [i.type for i in final.output] == ["message"] and final.output_text == ""


def test_a_stream_cut_by_its_budget_ends_with_response_incomplete() -> None:
    events = _stream(EventWriter(_draft()), [_text("a b")], out_of_tokens=True)
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"


def test_a_failure_mid_stream_is_an_error_event_then_response_failed() -> None:
    writer = EventWriter(_draft())
    raw = (
        writer.start()
        + writer.reply(_text("par"), False)
        + writer.failed("backend_error", "the replica died")
    )
    events = _parse(raw)
    assert [e.type for e in events][-2:] == ["error", "response.failed"]
    assert events[-1].response.error.message == "the replica died"


def test_the_conversation_a_follow_up_continues_is_one_assistant_turn() -> None:
    draft = _draft()
    unary_output(draft, "sure", [("call_1", "f", "{}")])
    assert draft.messages() == [
        {
            "role": "assistant",
            "content": "sure",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        }
    ]


@pytest.mark.parametrize("choice", [None, "required", {"type": "function", "name": "f"}])
def test_tool_choice_is_echoed(choice: Any) -> None:
    draft = _draft(tool_choice=choice)
    unary_output(draft, "x", [])
    draft.finish(1, 1, out_of_tokens=False)
    assert Response.model_validate(draft.obj()).tool_choice is not None


def test_input_items_give_every_item_a_type_an_id_and_content_parts_the_sdk_reads() -> None:
    items = input_items(
        [
            {"role": "user", "content": "hi"},
            {"type": "message", "role": "assistant", "id": "msg_mine", "content": "hello"},
            {"role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        ]
    )
    page = ResponseItemList.model_validate(items_page(items, "asc", 20, None))
    assert [item.type for item in page.data] == [
        "message",
        "message",
        "message",
        "function_call",
        "function_call_output",
    ]
    assert page.data[1].id == "msg_mine" and len({item.id for item in page.data}) == 5
    first, second = page.data[0], page.data[1]
    assert first.type == "message" and second.type == "message"
    assert first.content[0].type == "input_text" and first.content[0].text == "hi"
    assert second.content[0].type == "output_text"
    assert input_items("") == [] and input_items("x")[0]["content"] == [{"type": "input_text", "text": "x"}]


def test_an_items_page_is_newest_first_by_default_and_pages_after_an_id() -> None:
    items = [{"id": f"i{n}"} for n in range(5)]
    first = items_page(list(items), "desc", 2, None)
    assert ([i["id"] for i in first["data"]], first["first_id"], first["last_id"], first["has_more"]) == (
        ["i4", "i3"],
        "i4",
        "i3",
        True,
    )
    last = items_page(list(items), "desc", 2, "i1")
    assert (last["data"], last["has_more"]) == ([{"id": "i0"}], False)
    assert items_page(list(items), "asc", 10, None)["data"] == items
    assert items_page([], "asc", 10, None) == {
        "object": "list",
        "data": [],
        "first_id": None,
        "last_id": None,
        "has_more": False,
    }
    with pytest.raises(APIError) as caught:
        items_page(list(items), "asc", 2, "nope")
    assert caught.value.param == "after"
