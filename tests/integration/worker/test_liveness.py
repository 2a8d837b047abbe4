"""Busy is not wedged: the supervisor reuses a backend that answers late, keeps one that computes without
answering, and replaces only one that neither answers nor progresses — logging why (real backend processes)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from corral.gallery.registry import BackendRegistry
from corral.proto import backend_pb2 as pb
from corral.proto import backend_pb2_grpc
from corral.worker.liveness import LivenessWatch
from corral.worker.ports import PortAllocator
from corral.worker.supervisor import BackendBusy, BackendProcess, Supervisor

TOKEN = "t0k"
METADATA = (("authorization", f"Bearer {TOKEN}"),)
STOPPED_S = 3.0  # longer than one Health probe of the old supervisor (2 s), well inside the window (10 s)

# A backend that answers Health until the file `spin` appears in its directory, then (after writing `spinning`)
# spins on its event loop for good: it burns CPU and answers nothing (a loop stuck in a computation).
SPINNER = textwrap.dedent("""\
    import asyncio, os, sys
    import grpc
    from corral.proto import backend_pb2 as pb, backend_pb2_grpc

    class Servicer(backend_pb2_grpc.BackendServicer):
        async def Health(self, request, context):
            return pb.Reply(message=b"OK")

    async def main():
        server = grpc.aio.server()
        backend_pb2_grpc.add_BackendServicer_to_server(Servicer(), server)
        server.add_insecure_port(sys.argv[2])
        await server.start()
        while not os.path.exists("spin"):
            await asyncio.sleep(0.05)
        open("spinning", "w").close()
        while True:
            pass

    asyncio.run(main())
""")


def _free_base() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _supervisor(**options: Any) -> Supervisor:
    base = _free_base()
    return Supervisor(
        PortAllocator(base, base + 20), bind_host="127.0.0.1", token=TOKEN, start_timeout_s=30, **options
    )


@pytest.fixture
async def supervisor() -> AsyncIterator[Supervisor]:
    sup = _supervisor()
    yield sup
    await sup.stop_all(force=True)


@pytest.fixture
async def quick() -> AsyncIterator[Supervisor]:
    sup = _supervisor(stall_window_s=2.0)
    yield sup
    await sup.stop_all(force=True)


def _resume(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


async def _generating(proc: BackendProcess) -> grpc.aio.Channel:
    """Load the simulator at 20 tokens/s and start a long stream on it; returns the channel (close it)."""
    channel = grpc.aio.insecure_channel(proc.local_address)
    stub = backend_pb2_grpc.BackendStub(channel)
    loaded = await stub.LoadModel(
        pb.ModelOptions(Model="sim", Options=["output_token_time_s:0.05"]), timeout=30, metadata=METADATA
    )
    assert loaded.success, loaded.message
    stream = stub.PredictStream(pb.PredictOptions(Prompt="one two three", Tokens=10_000), metadata=METADATA)
    assert (await stream.read()).message  # tokens flow
    return channel


async def test_a_backend_that_answers_late_is_reused_not_replaced(
    supervisor: Supervisor, caplog: pytest.LogCaptureFixture
) -> None:
    first = await supervisor.ensure("m#0", "simulator")
    os.kill(first.pid, signal.SIGSTOP)  # no CPU for longer than a probe: as on a host that is saturated
    asyncio.get_running_loop().call_later(STOPPED_S, _resume, first.pid)
    try:
        with caplog.at_level(logging.INFO, logger="corral.worker.supervisor"):
            again = await supervisor.ensure("m#0", "simulator")
    finally:
        _resume(first.pid)
    assert (
        again is first and first.alive()
    )  # before: one 2 s probe failed and it was killed (-9) and restarted
    [line] = [r.getMessage() for r in caplog.records if "answered Health after" in r.getMessage()]
    assert f"(pid {first.pid})" in line and "busy, not wedged; reused" in line
    assert not [r for r in caplog.records if "replacing it" in r.getMessage()]


async def test_a_backend_that_stopped_for_good_is_replaced_and_the_evidence_logged(
    quick: Supervisor, caplog: pytest.LogCaptureFixture
) -> None:
    first = await quick.ensure("m#0", "simulator")
    channel = await _generating(first)
    try:
        await LivenessWatch(
            quick.ready, TOKEN
        ).observe_all()  # what the worker's watch records every few seconds
        os.kill(first.pid, signal.SIGSTOP)
        with caplog.at_level(logging.WARNING, logger="corral.worker.supervisor"):
            again = await quick.ensure("m#0", "simulator")
    finally:
        _resume(first.pid)
        await channel.close()
    assert again is not first and again.alive() and not first.alive()
    [line] = [r.getMessage() for r in caplog.records if "replacing it" in r.getMessage()]
    assert line.startswith(
        f"backend simulator for m#0 (pid {first.pid}) does not answer Health and made no "
        "progress for 2s (last Health answer "
    ), line
    assert "1 call(s) in flight at its last answer, process stopped); replacing it" in line, line
    assert "last progress " in line and "(replies produced 1, CPU " in line, line


async def test_a_backend_that_computes_without_answering_is_kept_and_the_load_told_why(
    quick: Supervisor, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "backends" / "spinner"
    directory.mkdir(parents=True)
    (directory / "spinner.py").write_text(SPINNER)
    (directory / "run.sh").write_text('#!/bin/sh\nexec "$CORRAL_PYTHON" spinner.py "$@"\n')
    (directory / "run.sh").chmod(0o755)
    (directory / "metadata.json").write_text('{"name": "spinner"}')
    quick.registry = BackendRegistry(tmp_path / "backends")
    first = await quick.ensure("m#0", "spinner")
    (directory / "spin").touch()
    async with asyncio.timeout(10):
        while not (directory / "spinning").exists():
            await asyncio.sleep(0.05)
    with (
        caplog.at_level(logging.WARNING, logger="corral.worker.supervisor"),
        pytest.raises(BackendBusy) as info,
    ):
        await quick.ensure("m#0", "spinner")
    assert first.alive() and quick.processes["m#0"] is first  # busy: kept
    message = str(info.value)
    assert message.startswith(
        f"backend spinner for m#0 (pid {first.pid}) answered no Health within 2s but makes "
        "progress (last Health answer "
    ), message
    assert (
        "it is busy, not wedged, so it was kept: try again later, or raise CORRAL_BACKEND_STALL_WINDOW"
        in message
    )
    assert "process running" in message, message
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [message]
