"""What only the fast lane has, on real backend processes: closed on a hostile frame, absent when the backend
serves gRPC only, and failing calls as gRPC does when the backend dies or goes silent (keepalive). What both
transports must do alike (answers, statuses, cancel, deadlines, auth, trace context) is test_conformance.py."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from corral.lane import frames
from corral.lane.client import EOF, Keepalive, LaneConnection, open_lane
from corral.proto import backend_pb2 as pb
from corral.routing.backend_client import BackendBudgets, BackendChannels
from support.backend_processes import Backend, running_backend

TOKEN = "lane-token"
KEEPALIVE = Keepalive(20.0, 60.0)
PROMPT = "one two three"


def _load(backend: Backend, model: str, *options: str) -> None:
    result = backend.stub.LoadModel(
        pb.ModelOptions(Model=model, Options=list(options)), timeout=60, metadata=backend.auth()
    )
    assert result.success, result.message


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with running_backend("simulator", tmp_path_factory.mktemp("lane"), token=TOKEN) as started:
        _load(started, "sim", "output_token_time_s:0.02")
        yield started


def _address(backend: Backend) -> str:
    return f"127.0.0.1:{backend.port}"


def _lane_port(backend: Backend) -> int:
    status = backend.stub.Status(pb.HealthMessage(), timeout=10, metadata=backend.auth())
    return int(status.corral_fast_lane_port)


async def _lane(backend: Backend, keepalive: Keepalive = KEEPALIVE) -> LaneConnection:
    return await open_lane(_address(backend), _lane_port(backend), TOKEN, keepalive, 5.0, lambda _: None)


async def _lane_of(channels: BackendChannels, address: str) -> LaneConnection:
    channels.caller(address)  # the first call looks for the lane in the background
    for _ in range(200):
        found = channels.lane(address)
        if found is not None:
            return found
        await asyncio.sleep(0.02)
    raise AssertionError(f"no fast lane to {address} after 4s")


async def _closed_by_peer(port: int, *sent: bytes) -> bool:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for data in sent:
            writer.write(data)
        await writer.drain()
        rest = await asyncio.wait_for(reader.read(), 5.0)  # until the backend closes
        return rest in (b"", frames.frame(frames.WELCOME, 0))
    finally:
        writer.close()
        await writer.wait_closed()


async def test_a_hostile_frame_length_closes_the_connection_and_the_backend_keeps_serving(
    backend: Backend,
) -> None:
    port = _lane_port(backend)
    huge = frames.HEADER.pack(0xFFFFFFF0, frames.CALL, 1)
    assert await _closed_by_peer(port, huge)  # before HELLO: over the 4 KiB hello bound
    assert await _closed_by_peer(port, frames.HEADER.pack(frames.MAX_HELLO_BYTES + 1, frames.HELLO, 0))
    assert await _closed_by_peer(
        port, frames.frame(frames.HELLO, 0, TOKEN.encode()), huge
    )  # after it: 50 MiB
    assert await _closed_by_peer(port, frames.frame(frames.CALL, 1, b"\x01"))  # a call before HELLO
    fast = await _lane(backend)
    try:
        assert (await fast.Predict(pb.PredictOptions(Prompt=PROMPT, Tokens=2), timeout=5)).tokens == 2
    finally:
        fast.close()


async def test_a_backend_without_the_lane_is_served_over_grpc(tmp_path: Path) -> None:
    with running_backend("simulator", tmp_path, token=TOKEN, CORRAL_BACKEND_FAST_LANE="0") as plain:
        _load(plain, "sim")
        assert _lane_port(plain) == 0
        channels = BackendChannels(TOKEN)
        try:
            address = _address(plain)
            for _ in range(3):
                caller = channels.caller(address)
                assert not isinstance(caller, LaneConnection)
                reply = await caller.Predict(
                    pb.PredictOptions(Prompt=PROMPT, Tokens=3), metadata=channels.metadata
                )
                assert reply.tokens == 3
                await asyncio.sleep(0.05)
            assert channels.lane(address) is None
        finally:
            await channels.close()


@pytest.mark.slow
async def test_a_backend_that_stops_answering_mid_stream_fails_the_stream_on_keepalive(
    tmp_path: Path,
) -> None:
    with running_backend("simulator", tmp_path, token=TOKEN) as frozen:
        _load(frozen, "sim", "output_token_time_s:0.02")
        fast = await _lane(frozen, Keepalive(1.0, 2.0))
        try:
            stream = fast.PredictStream(pb.PredictOptions(Prompt=PROMPT, Tokens=500))
            assert (await stream.read()).message
            os.kill(frozen.process.pid, signal.SIGSTOP)
            try:
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    while await asyncio.wait_for(stream.read(), 10.0) is not EOF:
                        pass
            finally:
                os.kill(frozen.process.pid, signal.SIGCONT)
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "within 2s (raise CORRAL_BACKEND_KEEPALIVE_TIMEOUT)" in (caught.value.details() or "")
            assert fast.closed
        finally:
            fast.close()


@pytest.mark.slow
async def test_a_backend_silent_for_longer_than_the_ping_interval_but_within_the_timeout_keeps_its_stream(
    tmp_path: Path,
) -> None:
    with running_backend("simulator", tmp_path, token=TOKEN) as starved:
        _load(starved, "sim", "output_token_time_s:0.02")
        fast = await _lane(starved, Keepalive(0.5, 10.0))  # pinged often, a generous bound
        try:
            stream = fast.PredictStream(pb.PredictOptions(Prompt=PROMPT, Tokens=200))
            pieces = [await stream.read()]
            os.kill(starved.process.pid, signal.SIGSTOP)  # no CPU for 3 s: what a saturated host does to it
            asyncio.get_running_loop().call_later(3.0, os.kill, starved.process.pid, signal.SIGCONT)
            while (reply := await asyncio.wait_for(stream.read(), 20.0)) is not EOF:
                pieces.append(reply)
            # before: a ping unanswered by the next one (0.5 s) failed the stream UNAVAILABLE and dropped the lane
            assert pieces[-1].tokens == 200 and not fast.closed
        finally:
            os.kill(starved.process.pid, signal.SIGCONT)
            fast.close()


async def test_a_backend_that_dies_mid_stream_fails_the_stream_unavailable(tmp_path: Path) -> None:
    with running_backend("simulator", tmp_path, token=TOKEN) as dying:
        _load(dying, "sim", "output_token_time_s:0.02")
        channels = BackendChannels(TOKEN, BackendBudgets())
        try:
            fast = await _lane_of(channels, _address(dying))
            stream = fast.PredictStream(pb.PredictOptions(Prompt=PROMPT, Tokens=500))
            assert (await stream.read()).message
            dying.process.kill()
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                while await asyncio.wait_for(stream.read(), 10.0) is not EOF:
                    pass
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
            assert channels.lane(_address(dying)) is None  # a lost lane is no longer used
        finally:
            await channels.close()


async def test_calls_with_different_deadlines_each_expire_at_their_own_on_one_timer(backend: Backend) -> None:
    """The connection's one deadline timer: a call never expires before its deadline, each past-due call expires
    when the timer reaches it (the timer re-arms for the next), and a call answered in time is answered."""
    fast = await _lane(backend)
    loop = asyncio.get_running_loop()
    ended: list[tuple[str, float, object]] = []

    async def call(name: str, tokens: int, timeout: float) -> None:
        started = loop.time()
        try:
            outcome: object = (
                await fast.Predict(pb.PredictOptions(Prompt=PROMPT, Tokens=tokens), timeout=timeout)
            ).tokens
        except grpc.aio.AioRpcError as exc:
            outcome = exc.code()
        ended.append((name, loop.time() - started, outcome))

    try:  # 100 tokens take 2 s; the calls share the lane, started together
        await asyncio.gather(call("late", 100, 0.9), call("early", 100, 0.3), call("in time", 3, 30))
        by_name = {name: (elapsed, outcome) for name, elapsed, outcome in ended}
        assert by_name["early"][1] == by_name["late"][1] == grpc.StatusCode.DEADLINE_EXCEEDED
        assert by_name["early"][0] >= 0.3 and by_name["late"][0] >= 0.9  # never before its own deadline
        assert [name for name, _, _ in ended].index("early") < [name for name, _, _ in ended].index("late")
        assert by_name["in time"][1] == 3
        assert (await fast.Predict(pb.PredictOptions(Prompt=PROMPT, Tokens=2), timeout=5)).tokens == 2
    finally:
        fast.close()
