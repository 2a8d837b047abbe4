"""Find the real backend processes behind replicas, by their `--addr` port, in /proc."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path


def _state(entry: Path) -> str:
    return (entry / "stat").read_text().split(")")[1].split()[0]


def backend_pid(port: str) -> int | None:
    """The live (not zombie) `corral backend … --addr H:<port>` process, if any."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if b"backend" in argv and any(a.endswith(f":{port}".encode()) for a in argv) and _state(entry) != "Z":
                return int(entry.name)
        except (OSError, IndexError):
            continue
    return None


def backend_alive(port: str) -> bool:
    return backend_pid(port) is not None


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
