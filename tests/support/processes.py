"""Find the real backend processes behind replicas, by their `--addr` port, in /proc.

A port alone names nothing on a shared host: another cluster (a second test session, a benchmark, a
multi-host namespace) may run a backend on the same port. So a backend is looked for only among the
descendants of the worker processes the test started, in their network namespace, and — inside a test
session — only among processes carrying this session's marker (tests/conftest.py sets CORRAL_TEST_SESSION,
and every process a test starts inherits it).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from support.cluster import Proc

SESSION_ENV = "CORRAL_TEST_SESSION"


def _state(entry: Path) -> str:
    return (entry / "stat").read_text().rpartition(")")[2].split()[0]


def _parent(entry: Path) -> int:
    return int((entry / "stat").read_text().rpartition(")")[2].split()[1])


def descendants(roots: Iterable[int]) -> set[int]:
    """Every live process below `roots` (children, grandchildren, …), from the parent links in /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                children.setdefault(_parent(entry), []).append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    found: set[int] = set()
    pending = list(roots)
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def _net_namespace(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def _carries_session(entry: Path) -> bool:
    """True outside a test session; inside one, only for processes with this session's marker."""
    marker = os.environ.get(SESSION_ENV)
    if not marker:
        return True
    return f"{SESSION_ENV}={marker}".encode() in (entry / "environ").read_bytes().split(b"\0")


def _is_backend_on(entry: Path, port: str) -> bool:
    argv = (entry / "cmdline").read_bytes().split(b"\0")
    return b"backend" in argv and any(a.endswith(f":{port}".encode()) for a in argv) and _state(entry) != "Z"


def backend_pid(port: str, workers: Iterable[Proc | int]) -> int | None:
    """The live (not zombie) `corral backend … --addr H:<port>` process started by one of `workers` (their
    `Proc`s or pids: a worker, or the `corral up` that runs them), in that worker's network namespace."""
    for root in {w.popen.pid if isinstance(w, Proc) else w for w in workers}:
        try:
            namespace = _net_namespace(root)
        except OSError:
            continue  # that worker is gone, and its backends with it
        for pid in sorted(descendants([root])):
            entry = Path(f"/proc/{pid}")
            try:
                if (
                    _is_backend_on(entry, port)
                    and _net_namespace(pid) == namespace
                    and _carries_session(entry)
                ):
                    return pid
            except (OSError, IndexError):
                continue
    return None


def backend_alive(port: str, workers: Iterable[Proc | int]) -> bool:
    return backend_pid(port, workers) is not None


def gone(pid: int, timeout_s: float = 10.0) -> bool:
    """True once `pid` has exited (a zombie has exited too; its parent simply has not reaped it yet)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            if _state(Path(f"/proc/{pid}")) == "Z":
                return True
        except (ProcessLookupError, OSError, IndexError):
            return True
        time.sleep(0.1)
    return False


def corral_up_ready(proc: subprocess.Popen[str], timeout_s: float) -> list[str]:
    """The lines `corral up` printed until it said ready ("(Ctrl-C stops everything)"); fails naming why."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError("corral up exited early:\n" + "".join(lines))
        lines.append(line)
        if line.startswith("(Ctrl-C stops everything)"):
            return lines
    raise AssertionError(f"corral up not ready within {timeout_s:g}s:\n" + "".join(lines))
