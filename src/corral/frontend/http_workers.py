"""`corral run --http-workers N`: N frontend processes serving one port, so one host's frontend scales
with its cores.

Each child is a complete frontend (its own id, PostgreSQL pool, NATS connection and replica view);
they share nothing but that view, exactly like frontends on separate hosts, and the kernel spreads
accepted connections over them (SO_REUSEPORT). Singleton duties (health monitor, reconciler) are
already held by one frontend at a time through advisory locks. The first child starts alone
(migrations, bootstrap key, seeded rules), the others once it listens. This parent only supervises:
a child that exits stops the others, and SIGINT/SIGTERM stops them all.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence

from corral.config.errors import ConfigError
from corral.config.frontend import FrontendSettings
from corral.runtime.processes import port_open, stop_process

log = logging.getLogger(__name__)

CHILD_ENV = "CORRAL_HTTP_WORKER_INDEX"
STOP_TIMEOUT_S = 20.0
POLL_S = 0.2


def child_index() -> int | None:
    """This process's index among `--http-workers` children, None in a plain frontend or the supervisor."""
    raw = os.environ.get(CHILD_ENV)
    return int(raw) if raw and raw.isdigit() else None


def _spawn(index: int, argv: Sequence[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "corral", "run", *argv], env={**os.environ, CHILD_ENV: str(index)}
    )


def _wait_listening(host: str, port: int, child: subprocess.Popen[bytes], stop: threading.Event) -> bool:
    while not stop.is_set():
        if child.poll() is not None:
            return False
        if port_open(host, port):
            return True
        stop.wait(POLL_S)
    return False


def run_http_workers(settings: FrontendSettings, argv: Sequence[str]) -> int:
    host, port = settings.address
    count = int(settings.http_workers)
    if port == 0:
        raise ConfigError(
            f"--http-workers {count} needs a fixed port in --address (got {host}:0): "
            "each process binds the same port"
        )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    children = [_spawn(0, argv)]
    try:
        if _wait_listening(
            host if host not in ("", "0.0.0.0", "::") else "127.0.0.1", port, children[0], stop
        ):
            children += [_spawn(i, argv) for i in range(1, count)]
            log.info(
                "%d frontend processes serve port %d (pids %s)",
                count,
                port,
                ", ".join(str(c.pid) for c in children),
            )
        while not stop.is_set():
            exited = next((c for c in children if c.poll() is not None), None)
            if exited is not None:
                log.error(
                    "frontend process %d exited with code %s; stopping the others",
                    exited.pid,
                    exited.returncode,
                )
                return exited.returncode or 1
            stop.wait(POLL_S)
        return 0
    finally:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children:
            stop_process(child, STOP_TIMEOUT_S)
