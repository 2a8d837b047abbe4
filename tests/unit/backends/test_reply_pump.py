"""Coalescing of streamed replies: text pieces that piled up go out as one Reply, in order."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from corral.backends import reply_pump
from corral.backends.engine import final_reply, piece_reply
from corral.backends.reply_pump import ReplyPump, coalesce
from corral.proto import backend_pb2 as pb


def test_consecutive_text_pieces_become_one_reply_and_the_final_counts_pass_unchanged() -> None:
    final = final_reply(tokens=3, prompt_tokens=2, prompt_time_s=0.1, generation_time_s=0.2)
    out = coalesce([piece_reply("a"), piece_reply(" b"), piece_reply(" ü"), final])
    assert [r.message for r in out] == [" ".join(["a", "b", "ü"]).encode(), b""]
    assert [d.content for d in out[0].chat_deltas] == ["a b ü"]
    assert out[1] is final


def test_a_reply_with_more_than_text_is_never_merged() -> None:
    reasoning = pb.Reply(message=b"x", chat_deltas=[pb.ChatDelta(content="x", reasoning_content="why")])
    out = coalesce([piece_reply("a"), reasoning, piece_reply("b")])
    assert [r.message for r in out] == [b"a", b"x", b"b"]


def test_one_reply_carries_at_most_the_cap_of_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reply_pump, "MAX_PIECES_PER_REPLY", 2)
    assert [r.message for r in coalesce([piece_reply(c) for c in "abcde"])] == [b"ab", b"cd", b"e"]


def _slow_words(count: int, delay_s: float, produced: list[int]) -> Iterator[pb.Reply]:
    for i in range(count):
        time.sleep(delay_s)
        produced.append(i)
        yield piece_reply(str(i))


async def test_the_pump_hands_over_everything_in_order_and_stops_at_the_next_token_when_asked() -> None:
    loop = asyncio.get_running_loop()
    pump = ReplyPump(lambda: _slow_words(5, 0.0, []), loop)
    thread = threading.Thread(target=pump.run)
    thread.start()
    got: list[bytes] = []
    while (batch := await pump.take()) is not None:
        got.extend(r.message for r in batch)
    thread.join()
    assert got == [b"0", b"1", b"2", b"3", b"4"]

    produced: list[int] = []
    pump = ReplyPump(lambda: _slow_words(1000, 0.01, produced), loop)
    thread = threading.Thread(target=pump.run)
    thread.start()
    assert await pump.take()
    pump.stop()
    await asyncio.to_thread(thread.join)
    assert len(produced) < 1000  # stopped early, not after the whole generation


async def test_the_pump_starts_the_generation_in_its_own_thread_and_hands_over_a_refusal() -> None:
    """The engine's call runs in the pump's thread (one hop to the first token, not two); what it raises (a request
    the engine refuses before its first reply) is what `take` raises."""
    loop = asyncio.get_running_loop()
    started_in: list[threading.Thread] = []

    def start() -> Iterator[pb.Reply]:
        started_in.append(threading.current_thread())
        return _slow_words(2, 0.0, [])

    pump = ReplyPump(start, loop)
    thread = threading.Thread(target=pump.run)
    thread.start()
    got = [r.message for batch in [await pump.take(), await pump.take()] if batch for r in batch]
    await asyncio.to_thread(thread.join)
    assert started_in == [thread] and b"0" in got

    def refuse() -> Iterator[pb.Reply]:
        raise ValueError("the prompt does not fit")

    pump = ReplyPump(refuse, loop)
    thread = threading.Thread(target=pump.run)
    thread.start()
    with pytest.raises(ValueError, match="does not fit"):
        await pump.take()
    await asyncio.to_thread(thread.join)
