"""A unary Predict is its engine's stream folded into one Reply (servicer.collect_reply): the pieces' text joined
before the final reply's counts, tool calls streamed in pieces carried in the answer, nothing once cancelled."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from corral.backends.servicer import CancelFlag, EngineProgress, collect_reply
from corral.proto import backend_pb2 as pb


class _Pieces:
    """An engine whose stream is the given replies (only `predict_stream` is read)."""

    def __init__(self, replies: list[pb.Reply], cancel: CancelFlag | None = None) -> None:
        self.replies, self.cancel = replies, cancel

    def predict_stream(self, request: pb.PredictOptions) -> Iterator[pb.Reply]:
        for n, reply in enumerate(self.replies):
            if n == 1 and self.cancel is not None:
                self.cancel.set()  # the caller went away after the first piece
            yield reply


def _call(name: str) -> pb.ToolCallDelta:
    return pb.ToolCallDelta(index=0, id=f"call-{name}", name=name, arguments="{}")


def _collect(engine: Any, cancel: CancelFlag | None = None) -> pb.Reply:
    return collect_reply(engine, pb.PredictOptions(), cancel or CancelFlag(), EngineProgress())


def test_the_pieces_text_is_joined_into_the_final_reply_with_its_counts() -> None:
    pieces = [pb.Reply(message=b"one "), pb.Reply(message=b"two "), pb.Reply(message=b"three")]
    reply = _collect(_Pieces([*pieces, pb.Reply(tokens=3, prompt_tokens=5)]))
    assert (reply.message, reply.tokens, reply.prompt_tokens) == (b"one two three", 3, 5)
    assert not reply.chat_deltas


def test_tool_calls_streamed_in_pieces_travel_in_the_answer_in_order() -> None:
    pieces = [
        pb.Reply(message=b"let me look"),
        pb.Reply(chat_deltas=[pb.ChatDelta(tool_calls=[_call("weather")])]),
        pb.Reply(message=b"."),
        pb.Reply(chat_deltas=[pb.ChatDelta(tool_calls=[_call("time"), _call("news")])]),
    ]
    reply = _collect(_Pieces([*pieces, pb.Reply(tokens=4)]))
    assert reply.message == b"let me look."
    assert [call.name for delta in reply.chat_deltas for call in delta.tool_calls] == [
        "weather",
        "time",
        "news",
    ]


def test_a_cancelled_call_answers_nothing() -> None:
    cancel = CancelFlag()
    engine = _Pieces([pb.Reply(message=b"a"), pb.Reply(message=b"b"), pb.Reply(tokens=2)], cancel)
    assert _collect(engine, cancel) == pb.Reply()
