"""The fast lane's keepalive: a backend is declared silent only after the timeout without any frame since a
ping, not for a late answer, not for time the frontend itself did not read (no socket: the clock is set by hand)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from corral.lane import frames
from corral.lane.client import Keepalive, LaneConnection
from corral.proto import backend_pb2 as pb

INTERVAL_S, TIMEOUT_S = 1.0, 10.0


class _Transport:
    """Collects what the connection writes."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


async def _calling() -> tuple[LaneConnection, list[LaneConnection]]:
    """A connection with one stream in flight (its ping timer armed), and the list `on_lost` appends to."""
    lost: list[LaneConnection] = []
    conn = LaneConnection("127.0.0.1:1", Keepalive(INTERVAL_S, TIMEOUT_S), lost.append)
    conn.connection_made(_Transport())  # type: ignore[arg-type]
    conn.PredictStream(pb.PredictOptions(Prompt="hi"))
    return conn, lost


def _tick(conn: LaneConnection, *, silent_s: float, late_s: float = 0.0) -> None:
    """Fire the ping timer `late_s` after it was due, with the backend silent for `silent_s` since a ping."""
    now_s = conn.loop.time()
    conn._silent_since_s = now_s - silent_s
    conn._ping_due_s = now_s - late_s
    conn._ping()


async def test_a_backend_silent_since_a_ping_for_the_timeout_fails_its_calls_naming_the_knob() -> None:
    conn, lost = await _calling()
    stream = conn.PredictStream(pb.PredictOptions(Prompt="again"))
    _tick(conn, silent_s=TIMEOUT_S)
    assert lost == [conn] and conn.closed
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await asyncio.wait_for(stream.read(), 1.0)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert caught.value.details() == (
        "fast lane to 127.0.0.1:1: no answer to a keepalive ping within 10s "
        "(raise CORRAL_BACKEND_KEEPALIVE_TIMEOUT)"
    )


async def test_a_ping_answered_later_than_the_interval_but_within_the_timeout_keeps_the_connection() -> None:
    conn, lost = await _calling()
    _tick(conn, silent_s=3 * INTERVAL_S)  # before: a ping not answered by the next one (1 s) closed it
    assert lost == [] and not conn.closed
    conn.close()


async def test_any_frame_from_the_backend_answers_the_pings() -> None:
    conn, lost = await _calling()
    conn._silent_since_s = conn.loop.time() - 2 * TIMEOUT_S  # pinged long ago, no PONG since
    conn.data_received(frames.frame(frames.REPLY, 99, b""))  # but a reply came: it is there all the same
    conn._ping_due_s = conn.loop.time()
    conn._ping()
    assert lost == [] and not conn.closed
    conn.close()


async def test_time_the_frontend_did_not_run_is_not_counted_against_the_backend() -> None:
    conn, lost = await _calling()
    _tick(conn, silent_s=TIMEOUT_S + 2.0, late_s=5.0)  # our loop stalled 5 s: its PONG may wait in the socket
    assert lost == [] and not conn.closed
    conn.close()


async def test_while_the_frontend_does_not_read_the_backend_is_not_blamed() -> None:
    conn, lost = await _calling()
    conn._paused = True  # the relay is slower than the backend: its replies (and PONGs) wait unread
    _tick(conn, silent_s=10 * TIMEOUT_S)
    assert lost == [] and not conn.closed
    conn.close()
