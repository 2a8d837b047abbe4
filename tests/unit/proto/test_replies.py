"""Merging runs of plain text pieces of a reply stream; everything else passes as it is, in order."""

from __future__ import annotations

import json

import pytest

from corral.proto import backend_pb2 as pb
from corral.proto.replies import merge_text_runs, merged_logprobs


def text(piece: str, delta: bool = False) -> pb.Reply:
    reply = pb.Reply(message=piece.encode())
    if delta:
        reply.chat_deltas.add(content=piece)
    return reply


def messages(replies: list[pb.Reply]) -> list[bytes]:
    return [r.message for r in replies]


def test_consecutive_text_pieces_become_one_reply() -> None:
    merged = merge_text_runs([text("Hel"), text("lo"), text(" world")], max_pieces=10)
    assert messages(merged) == [b"Hello world"]
    assert len(merged[0].chat_deltas) == 0


def test_a_run_is_cut_at_max_pieces() -> None:
    merged = merge_text_runs([text(c) for c in "abcde"], max_pieces=2)
    assert messages(merged) == [b"ab", b"cd", b"e"]


def test_max_pieces_of_one_merges_nothing() -> None:
    pieces = [text("a"), text("b")]
    assert merge_text_runs(pieces, max_pieces=1) == pieces


def test_chat_delta_content_is_merged_with_the_message() -> None:
    merged = merge_text_runs([text("a", delta=True), text("b"), text("c", delta=True)], max_pieces=10)
    assert messages(merged) == [b"abc"]
    assert [d.content for d in merged[0].chat_deltas] == ["ac"]  # only the pieces that carried a delta


@pytest.mark.parametrize(
    "special",
    [
        pb.Reply(message=b"x", tokens=3),
        pb.Reply(message=b"x", prompt_tokens=1),
        pb.Reply(audio=b"\x00\x01"),
        pb.Reply(logprobs=b'{"content": []}'),
        pb.Reply(chat_deltas=[pb.ChatDelta(reasoning_content="hmm")]),
        pb.Reply(chat_deltas=[pb.ChatDelta(tool_calls=[pb.ToolCallDelta(index=0, name="f")])]),
        pb.Reply(chat_deltas=[pb.ChatDelta(content="a"), pb.ChatDelta(content="b")]),
    ],
)
def test_a_reply_that_is_not_plain_text_passes_as_it_is_between_runs(special: pb.Reply) -> None:
    merged = merge_text_runs([text("a"), text("b"), special, text("c"), text("d")], max_pieces=10)
    assert len(merged) == 3
    assert merged[1] is special
    assert (merged[0].message, merged[2].message) == (b"ab", b"cd")


def test_a_lone_piece_is_passed_as_the_same_object() -> None:
    piece = text("only")
    assert merge_text_runs([piece], max_pieces=10)[0] is piece
    assert merge_text_runs([], max_pieces=10) == []


def test_non_utf8_bytes_are_joined_untouched() -> None:
    merged = merge_text_runs([pb.Reply(message=b"\xe2\x82"), pb.Reply(message=b"\xac")], max_pieces=10)
    assert merged[0].message.decode() == "€"  # a character cut between pieces is whole again


def test_logprobs_of_several_replies_fold_into_one_content_list() -> None:
    pieces = [
        json.dumps({"content": [{"token": "a", "logprob": -1.0}]}).encode(),
        b"",
        json.dumps({"content": [{"token": "é", "logprob": -0.5}]}).encode(),
    ]
    folded = json.loads(merged_logprobs(pieces))
    assert [e["token"] for e in folded["content"]] == ["a", "é"]
    assert "é".encode() in merged_logprobs(pieces)  # not escaped


def test_no_logprobs_fold_into_nothing() -> None:
    assert merged_logprobs([]) == b""
    assert merged_logprobs([b"", b""]) == b""
    assert merged_logprobs([b'{"content": []}']) == b""
