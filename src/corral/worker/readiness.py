"""Backend probe for `/readyz`: dial each backend the worker believes it serves.

Only READY backends are dialled — a backend still STARTING (until its first good Health)
or already STOPPING is skipped, so a cold start or an ordinary shutdown never flips
readiness. Dials run in a background loop (the probe handler itself stays synchronous and
never blocks the event loop); a backend whose process has exited is caught at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from corral.runtime.loops import run_periodic
from corral.worker.supervisor import BackendState, Supervisor

log = logging.getLogger(__name__)

PROBE_INTERVAL_S = 1.0
DIAL_TIMEOUT_S = 1.0


async def dial(host: str, port: int, timeout_s: float = DIAL_TIMEOUT_S) -> str | None:
    """None when a TCP connection opens; otherwise why not."""
    try:
        _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
    except TimeoutError:
        return f"no answer within {timeout_s:g}s"
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return None


class BackendProber:
    def __init__(self, supervisor: Supervisor, interval_s: float = PROBE_INTERVAL_S) -> None:
        self.supervisor, self.interval_s = supervisor, interval_s
        self._failures: dict[str, tuple[int, str]] = {}  # key -> (port, why the dial failed)

    async def probe_once(self) -> None:
        failures: dict[str, tuple[int, str]] = {}
        for key, proc in list(self.supervisor.processes.items()):
            if proc.state is not BackendState.READY:
                continue
            why = await dial(proc.dial_host, proc.port)
            if why is not None:
                failures[key] = (proc.port, why)
        self._failures = failures

    async def run(self, stop: asyncio.Event) -> None:
        await run_periodic(
            "backend probe", self.probe_once, self.interval_s, stop, backoff_cap_s=self.interval_s
        )

    def reason(self) -> str | None:
        """Why the worker cannot serve what it believes it serves, or None."""
        for key, proc in list(self.supervisor.processes.items()):
            if proc.state is not BackendState.READY:
                continue
            if not proc.alive():
                return f"backend {key} (port {proc.port}) exited with code {proc.process.returncode}"
            failure = self._failures.get(key)
            if failure is not None and failure[0] == proc.port:
                return f"backend {key} refuses connections on {proc.local_address} ({failure[1]})"
        return None
