"""Busy or wedged: whether a backend process the worker started still makes progress.

A backend on a loaded CPU answers late; one that is stopped, deadlocked or starved for good does not answer
at all and does nothing. Killing the first loses its work (and the client waits for a reload), keeping the
second hangs every call sent to it. So a READY backend that a load would reuse is judged, not probed once:

* it answers Health within CORRAL_BACKEND_STALL_WINDOW: ALIVE, reused (however late the answer came);
* it answers nothing for that long but makes progress (the replies its engine produced, or its CPU time,
  moved): BUSY, kept, and the load is told so;
* it answers nothing and makes no progress for the whole window: WEDGED, replaced.

The evidence — when it last answered, when it last made progress, how many calls it had in flight, its
process state — is kept per process by a watch (one `Status` every WATCH_INTERVAL_S, the CPU time of its
process group from /proc) and logged with every decision that is not an immediate answer.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import grpc

from corral.config.parse import format_duration_s
from corral.proto import backend_pb2, backend_pb2_grpc
from corral.runtime.loops import run_periodic

log = logging.getLogger(__name__)

STALL_WINDOW_KNOB = "CORRAL_BACKEND_STALL_WINDOW (--backend-stall-window)"
WATCH_INTERVAL_S = 5.0
STATUS_TIMEOUT_S = 2.0
SAMPLE_S = 1.0  # CPU time is sampled this often while a silent backend is judged
RETRY_S = 0.2  # a Health call refused at once (connection reset) is tried again after this
SLOW_ANSWER_S = 1.0  # an answer later than this is logged with the evidence
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
STATE_NAMES = {
    "R": "running",
    "S": "sleeping",
    "D": "in uninterruptible I/O",
    "T": "stopped",
    "t": "stopped by a tracer",
    "Z": "exited (zombie)",
}


class Verdict(enum.Enum):
    ALIVE = "alive"
    BUSY = "busy"
    WEDGED = "wedged"


@dataclass
class Liveness:
    """What the worker last saw of one backend process (monotonic seconds)."""

    answered_s: float  # its last answer to Health or Status
    progress_s: float  # the last time its replies count or its CPU time moved
    in_flight: int = 0  # engine calls in flight at its last Status answer
    replies: int = 0  # replies produced at its last Status answer
    cpu_ticks: int = -1  # CPU time of its process group at the last sample (-1: none yet)
    states: str = ""  # process states of its group at the last sample, e.g. "T"

    @classmethod
    def started(cls) -> Liveness:
        now = time.monotonic()
        return cls(answered_s=now, progress_s=now)

    def answered(self, now_s: float, status: backend_pb2.StatusResponse | None = None) -> None:
        self.answered_s = now_s
        if status is None:
            return
        if status.corral_replies_produced != self.replies:
            self.progress_s = now_s
        self.in_flight, self.replies = status.corral_in_flight, status.corral_replies_produced

    def sampled(self, now_s: float, cpu_ticks: int, states: str) -> None:
        if self.cpu_ticks >= 0 and cpu_ticks > self.cpu_ticks:
            self.progress_s = now_s
        self.cpu_ticks, self.states = cpu_ticks, states

    def evidence(self, now_s: float) -> str:
        state = ", ".join(STATE_NAMES.get(letter, letter) for letter in self.states) or "unknown"
        return (
            f"last Health answer {now_s - self.answered_s:.1f}s ago, last progress {now_s - self.progress_s:.1f}s "
            f"ago (replies produced {self.replies}, CPU {max(self.cpu_ticks, 0) / CLOCK_TICKS_PER_S:.1f}s), "
            f"{self.in_flight} call(s) in flight at its last answer, process {state}"
        )


class Watched(Protocol):
    """The part of a supervised backend process the judgement reads."""

    liveness: Liveness

    @property
    def local_address(self) -> str: ...

    @property
    def pid(self) -> int: ...

    def alive(self) -> bool: ...


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    waited_s: float
    evidence: str


def group_cpu(pgid: int, proc_root: Path = Path("/proc")) -> tuple[int, str]:
    """CPU ticks (user + system) of every process in group `pgid`, and their state letters (blocking: /proc)."""
    ticks, states = 0, set()
    for entry in proc_root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 12 and fields[2] == str(pgid):  # fields[0] is the state, [2] the process group
            ticks += int(fields[11]) + int(fields[12])
            states.add(fields[0])
    return ticks, "".join(sorted(states))


def _metadata(token: str) -> tuple[tuple[str, str], ...] | None:
    return (("authorization", f"Bearer {token}"),) if token else None


async def read_status(address: str, token: str, timeout_s: float) -> backend_pb2.StatusResponse | None:
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            status: backend_pb2.StatusResponse = await backend_pb2_grpc.BackendStub(channel).Status(
                backend_pb2.HealthMessage(), timeout=timeout_s, metadata=_metadata(token)
            )
            return status
    except grpc.aio.AioRpcError:
        return None


async def answers_health(address: str, token: str, deadline_s: float) -> bool:
    """True as soon as Health answers OK; False when nothing answered before `deadline_s` (monotonic)."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = backend_pb2_grpc.BackendStub(channel)
        while (left_s := deadline_s - time.monotonic()) > 0:
            try:
                reply = await stub.Health(
                    backend_pb2.HealthMessage(), timeout=left_s, metadata=_metadata(token)
                )
            except grpc.aio.AioRpcError:
                await asyncio.sleep(min(RETRY_S, max(0.0, deadline_s - time.monotonic())))
                continue
            if reply.message == b"OK":
                return True
            await asyncio.sleep(RETRY_S)
    return False


async def sample(proc: Watched) -> int:
    """Sample the CPU time of `proc`'s process group into its evidence; returns it (ticks)."""
    ticks, states = await asyncio.to_thread(group_cpu, proc.pid)
    proc.liveness.sampled(time.monotonic(), ticks, states)
    return ticks


async def judge(proc: Watched, token: str, window_s: float) -> Judgement:
    """ALIVE at its first Health answer within `window_s`; else BUSY when its CPU time moved during the window
    (it computes: a prefill, a generation), else WEDGED (also when it exited meanwhile)."""
    started_s = time.monotonic()
    answer = asyncio.create_task(answers_health(proc.local_address, token, started_s + window_s))
    moved = False
    try:
        ticks = await sample(proc)  # the baseline: what it did before the window does not count
        while not answer.done() and proc.alive():
            await asyncio.wait({answer}, timeout=SAMPLE_S)
            if not answer.done():
                previous, ticks = ticks, await sample(proc)
                moved = moved or ticks > previous
    finally:
        if not answer.done():
            answer.cancel()
        await asyncio.gather(answer, return_exceptions=True)
    liveness = proc.liveness
    if not answer.cancelled() and answer.exception() is None and answer.result():
        status = await read_status(proc.local_address, token, STATUS_TIMEOUT_S)
        await sample(proc)
        now_s = time.monotonic()
        liveness.answered(now_s, status)
        return Judgement(Verdict.ALIVE, now_s - started_s, liveness.evidence(now_s))
    now_s = time.monotonic()
    verdict = Verdict.BUSY if moved and proc.alive() else Verdict.WEDGED
    return Judgement(verdict, now_s - started_s, liveness.evidence(now_s))


def busy_message(name: str, key: str, pid: int, window_s: float, judgement: Judgement) -> str:
    return (
        f"backend {name} for {key} (pid {pid}) answered no Health within {format_duration_s(window_s)} but "
        f"makes progress ({judgement.evidence}); it is busy, not wedged, so it was kept: try again later, "
        f"or raise {STALL_WINDOW_KNOB}"
    )


class LivenessWatch:
    """Every WATCH_INTERVAL_S, one Status and one CPU sample per READY backend: the evidence a judgement logs."""

    def __init__(
        self, processes: Callable[[], Iterable[Watched]], token: str, interval_s: float = WATCH_INTERVAL_S
    ) -> None:
        self._processes, self._token, self.interval_s = processes, token, interval_s

    async def observe(self, proc: Watched) -> None:
        await sample(proc)
        status = await read_status(proc.local_address, self._token, STATUS_TIMEOUT_S)
        if status is not None:
            proc.liveness.answered(time.monotonic(), status)

    async def observe_all(self) -> None:
        await asyncio.gather(*(self.observe(proc) for proc in self._processes() if proc.alive()))

    async def run(self, stop: asyncio.Event) -> None:
        await run_periodic(
            "backend liveness watch", self.observe_all, self.interval_s, stop, backoff_cap_s=self.interval_s
        )
