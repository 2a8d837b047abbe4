"""The supervisor with real backend processes (simulator engine)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from corral.gallery.registry import BackendRegistry
from corral.worker.ports import PortAllocator
from corral.worker.supervisor import (
    BackendProcess,
    BackendStartFailed,
    BackendState,
    Supervisor,
    _probe_health,
)


def _free_base() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def supervisor() -> AsyncIterator[Supervisor]:
    base = _free_base()
    sup = Supervisor(PortAllocator(base, base + 20), bind_host="127.0.0.1", token="t0k", start_timeout_s=30)
    yield sup
    await sup.stop_all(force=True)


async def test_a_backend_is_ready_only_after_health_answers(supervisor: Supervisor) -> None:
    proc = await supervisor.ensure("m#0", "simulator")
    assert proc.state is BackendState.READY
    assert await _probe_health(proc.local_address, "t0k", 2.0)
    assert not await _probe_health(proc.local_address, "wrong", 2.0)  # bearer auth is on


async def test_ensure_reuses_a_live_process_for_the_same_key(supervisor: Supervisor) -> None:
    first = await supervisor.ensure("m#0", "simulator")
    second = await supervisor.ensure("m#0", "simulator")
    assert first is second


async def test_a_backend_that_dies_while_starting_reports_its_stderr(
    supervisor: Supervisor, tmp_path: Path
) -> None:
    broken = tmp_path / "backends" / "broken"
    broken.mkdir(parents=True)
    (broken / "run.sh").write_text('#!/bin/sh\necho "broken backend: cannot start on $2" >&2\nexit 2\n')
    (broken / "run.sh").chmod(0o755)
    (broken / "metadata.json").write_text('{"name": "broken"}')
    supervisor.registry = BackendRegistry(tmp_path / "backends")
    with pytest.raises(BackendStartFailed) as info:
        await supervisor.ensure("m#0", "broken")
    assert "exited with code 2 while starting" in str(info.value)
    assert "broken backend: cannot start on 127.0.0.1:" in str(info.value)
    assert supervisor.processes == {}
    assert supervisor.ports.in_use == {}


async def test_a_backend_that_is_not_installed_is_refused_before_any_process(supervisor: Supervisor) -> None:
    with pytest.raises(BackendStartFailed, match="'no-such-engine' is not installed"):
        await supervisor.ensure("m#0", "no-such-engine")
    assert supervisor.processes == {} and supervisor.ports.in_use == {}


async def test_stopping_a_key_stops_exactly_that_process(supervisor: Supervisor) -> None:
    a = await supervisor.ensure("a#0", "simulator")
    b = await supervisor.ensure("b#0", "simulator")
    matched, _freed = await supervisor.stop_key("a#0")
    assert matched and not a.alive() and b.alive()
    assert supervisor.resolve("b") == ["b#0"]
    assert await supervisor.stop_key("a#0") == (False, False)


async def test_a_port_another_process_holds_is_set_aside_and_the_backend_starts_on_the_next(
    supervisor: Supervisor,
) -> None:
    base = supervisor.ports.base_port
    squatter = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind(("127.0.0.1", base))  # what a stray process does to the first port of the range
    squatter.listen()
    try:
        proc = await supervisor.ensure("m#0", "simulator")
        assert proc.port != base  # before: the start failed on the held port, and every retry took it again
        await supervisor.stop_key("m#0")
        again = await supervisor.ensure("m#0", "simulator")
        assert again.port != base  # the held port is not handed back by affinity or quarantine's end
    finally:
        squatter.close()


# --- spare processes (--backend-prestart) ---------------------------------------------------------------


@pytest.fixture
async def spared() -> AsyncIterator[Supervisor]:
    base = _free_base()
    sup = Supervisor(
        PortAllocator(base, base + 20),
        bind_host="127.0.0.1",
        token="t0k",
        start_timeout_s=30,
        prestart=("simulator",),
    )
    yield sup
    await sup.stop_all(force=True)


async def _spare_ready(sup: Supervisor, name: str = "simulator") -> BackendProcess:
    proc = await sup._spare_starts[name]
    assert proc is not None and proc.state is BackendState.READY
    return proc


async def test_a_cold_start_takes_the_spare_process_and_its_port_and_log(spared: Supervisor) -> None:
    spared.keep_spares()
    spare = await _spare_ready(spared)
    pid, port = spare.process.pid, spare.port
    assert spared.processes == {}  # a spare is not a replica: no list, drain or readiness sees it
    assert spared.ports.in_use == {port: "spare:simulator"}
    kept = spare.health_channel  # the channel its readiness was seen on: the handover's probe asks on it
    assert kept is not None and kept.get_state() is grpc.ChannelConnectivity.READY

    proc = await spared.ensure("m#0", "simulator")

    assert proc.health_channel is None  # no longer a spare: its channel is closed
    assert proc.process.pid == pid and proc.port == port and proc.key == "m#0"
    assert spared.processes == {"m#0": proc} and spared.spares == {}
    assert spared.ports.in_use == {port: "m#0"}
    assert any("starting backend 'simulator'" in line for line in spared.logs.tail("m#0", 20))
    assert not spared.logs.known("spare:simulator")
    assert await _probe_health(proc.local_address, "t0k", 2.0)


async def test_a_taken_spare_is_replaced_only_after_the_worker_started_nothing_for_a_while(
    spared: Supervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    import corral.worker.supervisor as supervisor_module

    monkeypatch.setattr(supervisor_module, "SPARE_REFILL_DELAY_S", 1.0)
    spared.keep_spares()
    first = await _spare_ready(spared)
    await spared.ensure("a#0", "simulator")  # takes it; the refill waits for a quiet second
    await spared.ensure("b#0", "simulator")  # no spare now: started fresh, and the quiet second restarts
    assert spared.processes["b#0"].process.pid != first.process.pid
    assert "simulator" not in spared.spares
    refill = await _spare_ready(spared)
    assert refill.process.pid not in {first.process.pid, spared.processes["b#0"].process.pid}
    assert refill.key == "spare:simulator"


async def test_a_dead_spare_is_not_handed_over(spared: Supervisor) -> None:
    spared.keep_spares()
    spare = await _spare_ready(spared)
    spare.process.kill()
    await spare.process.wait()
    proc = await spared.ensure("m#0", "simulator")
    assert proc.process.pid != spare.process.pid and proc.alive()
    assert proc.port in spared.ports.in_use


async def test_a_spare_that_stopped_answering_is_not_handed_over_though_its_channel_is_open(
    spared: Supervisor,
) -> None:
    spared.keep_spares()
    spare = await _spare_ready(spared)
    assert spare.health_channel is not None
    os.kill(spare.process.pid, signal.SIGSTOP)  # alive, its connection open, answering nothing
    try:
        proc = await spared.ensure("m#0", "simulator")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(spare.process.pid, signal.SIGCONT)
    assert proc.process.pid != spare.process.pid and proc.alive()
    assert not spare.alive() and spare.health_channel is None


async def test_a_load_arriving_while_the_spare_starts_waits_for_it_instead_of_starting_another(
    spared: Supervisor,
) -> None:
    spared.keep_spares()
    while "simulator" not in spared.spares:  # spawned, not answering Health yet
        await asyncio.sleep(0.005)
    starting = spared.spares["simulator"]
    proc = await spared.ensure("m#0", "simulator")
    assert proc is starting and proc.state is BackendState.READY


async def test_upgrade_or_delete_of_a_backend_stops_its_spare(spared: Supervisor) -> None:
    spared.keep_spares()
    spare = await _spare_ready(spared)
    assert await spared.drop_spares({"simulator"}) == ["spare:simulator"]
    assert not spare.alive() and spared.spares == {} and spared.ports.in_use == {}
    assert spare.health_channel is None  # its kept channel closed with it


async def test_stopping_the_worker_stops_its_spares(spared: Supervisor) -> None:
    spared.keep_spares()
    spare = await _spare_ready(spared)
    await spared.stop_all()
    assert not spare.alive() and spared.spares == {}


async def test_a_spare_of_a_backend_that_is_not_installed_is_skipped(supervisor: Supervisor) -> None:
    supervisor.prestart = ("no-such-engine",)
    supervisor.keep_spares()
    assert await supervisor._spare_starts["no-such-engine"] is None
    assert supervisor.spares == {} and supervisor.ports.in_use == {}


async def test_a_spare_that_dies_on_its_own_is_replaced_and_a_crashing_one_given_up(
    spared: Supervisor, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import corral.worker.supervisor as supervisor_module

    monkeypatch.setattr(supervisor_module, "SPARE_REFILL_DELAY_S", 0.2)
    spared.keep_spares()
    pids = []
    for death in range(1, supervisor_module.SPARE_MAX_DEATHS + 1):
        starting = spared._spare_starts["simulator"]
        spare = await _spare_ready(spared)
        pids.append(spare.process.pid)
        spare.process.kill()
        async with asyncio.timeout(30):
            while spare.port in spared.ports.in_use:  # reaped, its port freed
                await asyncio.sleep(0.02)
            while (
                death < supervisor_module.SPARE_MAX_DEATHS and spared._spare_starts["simulator"] is starting
            ):
                await asyncio.sleep(0.02)  # another spare is on its way
    assert len(set(pids)) == supervisor_module.SPARE_MAX_DEATHS  # a new process each time
    await asyncio.sleep(0.5)
    assert spared.spares == {} and spared.ports.in_use == {}  # given up, and said so
    assert "exited on its own 3 times in a row" in caplog.text
