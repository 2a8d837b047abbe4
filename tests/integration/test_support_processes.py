"""support.processes finds a replica's backend only below the worker that started it, in that worker's
network namespace and test session — never a process of another cluster on the same port."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.cluster import free_port
from support.processes import SESSION_ENV, backend_alive, backend_pid, descendants
from support.waiting import wait_for

SLEEPER = "import time; time.sleep(120)"


def _fake_worker(*children: str) -> subprocess.Popen[bytes]:
    """A shell standing for a worker: it starts `children` (shell commands) and waits for them."""
    script = " ".join(f"{child} &" for child in children) + " wait"
    return subprocess.Popen(["sh", "-c", script], start_new_session=True)


def _fake_backend(port: int, *wrapper: str) -> str:
    """A process whose argv looks like `corral backend … --addr 127.0.0.1:<port>` (`wrapper` execs it)."""
    return shlex.join(
        [*wrapper, sys.executable, "-c", SLEEPER, "backend", "simulator", "--addr", f"127.0.0.1:{port}"]
    )


def _argv_below(worker: subprocess.Popen[bytes], port: int) -> list[int]:
    """The processes below `worker` whose argv names `port`."""
    found = []
    for pid in descendants([worker.pid]):
        try:
            if f":{port}".encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


def _backend_below(worker: subprocess.Popen[bytes], port: int) -> int:
    wait_for(lambda: len(_argv_below(worker, port)) == 1, f"the fake backend below worker {worker.pid}", 10)
    return _argv_below(worker, port)[0]


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        for pid in descendants([proc.pid]) | {proc.pid}:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        proc.wait(10)


def test_two_clusters_with_a_backend_on_the_same_port_each_find_their_own(
    started: list[subprocess.Popen[bytes]],
) -> None:
    port = free_port()
    first, second = _fake_worker(_fake_backend(port)), _fake_worker(_fake_backend(port))
    started += [first, second]
    mine, theirs = _backend_below(first, port), _backend_below(second, port)
    assert backend_pid(str(port), [first.pid]) == mine
    assert backend_pid(str(port), [second.pid]) == theirs
    assert backend_pid(str(port + 1), [first.pid, second.pid]) is None  # the port matters too
    os.kill(mine, 9)
    wait_for(lambda: not backend_alive(str(port), [first.pid]), "the first cluster's backend seen gone", 10)
    assert backend_pid(str(port), [second.pid]) == theirs  # the other cluster's is never taken for it


def test_a_process_of_another_session_or_network_namespace_under_the_worker_is_not_its_backend(
    started: list[subprocess.Popen[bytes]],
) -> None:
    port = free_port()
    worker = _fake_worker(_fake_backend(port, "env", f"{SESSION_ENV}=another-session"))
    started.append(worker)
    _backend_below(worker, port)
    assert backend_pid(str(port), [worker.pid]) is None
    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        pytest.skip("cannot create a network namespace here (unshare -n)")
    elsewhere = _fake_worker(_fake_backend(port, "unshare", "-n"))
    started.append(elsewhere)
    _backend_below(elsewhere, port)
    assert backend_pid(str(port), [elsewhere.pid]) is None
