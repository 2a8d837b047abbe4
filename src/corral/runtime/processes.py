"""Process helpers every command shares: stop a child process in order, find a free port, probe one."""

from __future__ import annotations

import contextlib
import socket
import subprocess


def stop_process(popen: subprocess.Popen[bytes], timeout_s: float = 10.0) -> int | None:
    """SIGTERM, wait up to `timeout_s`, then SIGKILL; always reaps. Returns the exit code."""
    if popen.poll() is None:
        popen.terminate()
        try:
            popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()
    return popen.returncode


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout_s):
        return True
    return False
