"""The fast lane's framing (corral.lane.frames): split anywhere, bounded, statuses round-trip."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from corral.lane import frames
from corral.lane.client import EOF, _StreamCall
from corral.proto import backend_pb2 as pb


def test_frames_split_at_any_byte_come_out_whole_and_in_order() -> None:
    stream = (
        frames.frame(frames.CALL, 7, b"\x01abc")
        + frames.frame(frames.CANCEL, 7)
        + frames.frame(frames.REPLY, 9, b"x" * 300)
    )
    for cut in range(1, len(stream)):
        reader = frames.FrameReader()
        received = reader.feed(stream[:cut]) + reader.feed(stream[cut:])
        assert received == [
            (frames.CALL, 7, b"\x01abc"),
            (frames.CANCEL, 7, b""),
            (frames.REPLY, 9, b"x" * 300),
        ]


def test_a_length_over_the_limit_is_refused_before_any_payload_arrives() -> None:
    reader = frames.FrameReader(limit=frames.MAX_HELLO_BYTES)
    with pytest.raises(frames.FrameTooLarge, match="4097 bytes announced"):
        reader.feed(frames.HEADER.pack(frames.MAX_HELLO_BYTES + 1, frames.HELLO, 0))
    with pytest.raises(frames.FrameTooLarge):
        frames.FrameReader().feed(frames.HEADER.pack(0xFFFFFFFF, frames.REPLY, 1))


def test_an_error_frame_carries_the_grpc_status_and_details() -> None:
    [(kind, call_id, payload)] = frames.FrameReader().feed(
        frames.error_frame(3, grpc.StatusCode.FAILED_PRECONDITION, "model not loaded — ü")
    )
    assert (kind, call_id) == (frames.ERROR, 3)
    assert frames.parse_error(payload) == (grpc.StatusCode.FAILED_PRECONDITION, "model not loaded — ü")
    assert frames.parse_error(b"")[0] == grpc.StatusCode.UNKNOWN


class _FakeLane:
    """The connection side a stream call uses (no socket: replies are delivered by hand)."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.held = 0

    def start(self, call: object, method: frames.Method, request: object, trace: bytes | None) -> int:
        return 1

    def buffered(self, size: int) -> None:
        self.held += size

    def consumed(self, size: int) -> None:
        self.held -= size

    def cancel(self, call_id: int) -> None:
        pass


async def test_replies_that_piled_up_are_read_as_one_after_the_first_which_stays_alone() -> None:
    conn = _FakeLane()
    stream = _StreamCall(conn, frames.METHODS["PredictStream"], pb.PredictOptions())  # type: ignore[arg-type]
    for word in (b"a", b" b", b" c", b" d"):
        stream.deliver(frames.REPLY, pb.Reply(message=word).SerializeToString())
    stream.deliver(frames.REPLY, pb.Reply(tokens=4, prompt_tokens=1).SerializeToString())
    stream.deliver(frames.END, b"")
    replies = []
    while (reply := await stream.read()) is not EOF:
        replies.append(reply)
    assert [(r.message, r.tokens) for r in replies] == [(b"a", 0), (b" b c d", 0), (b"", 4)]
    assert conn.held == 0  # every buffered byte was accounted back (reading resumes)
