"""Graceful deregistration on SIGTERM: drain, wait (bounded) for in-flight work, deregister.

In-flight work is judged by the backends themselves: gRPC `Status` answers BUSY while a
request runs. The wait ends after two idle readings in a row or at the drain timeout.
"""

from __future__ import annotations

import asyncio
import logging
import time

from corral.node.registration import FrontendClient
from corral.proto import backend_pb2
from corral.worker.liveness import read_status
from corral.worker.supervisor import BackendState, Supervisor

log = logging.getLogger(__name__)

STATUS_TIMEOUT_S = 2.0
POLL_S = 0.5
IDLE_READINGS = 2


async def _busy(address: str, token: str) -> bool:
    reply = await read_status(address, token, STATUS_TIMEOUT_S)
    return (
        reply is not None and reply.state == backend_pb2.StatusResponse.BUSY
    )  # no answer: it serves nothing


async def busy_backends(supervisor: Supervisor) -> list[str]:
    ready = [
        (k, p) for k, p in list(supervisor.processes.items()) if p.state is BackendState.READY and p.alive()
    ]
    flags = await asyncio.gather(*(_busy(p.local_address, supervisor.token) for _k, p in ready))
    return [key for (key, _p), busy in zip(ready, flags, strict=True) if busy]


async def wait_idle(supervisor: Supervisor, timeout_s: float) -> list[str]:
    """Wait until no backend is busy; returns the keys still busy when the timeout hit (empty if idle)."""
    deadline = time.monotonic() + timeout_s
    idle_readings = 0
    while True:
        busy = await busy_backends(supervisor)
        idle_readings = 0 if busy else idle_readings + 1
        if idle_readings >= IDLE_READINGS:
            return []
        if time.monotonic() >= deadline:
            return busy
        await asyncio.sleep(POLL_S)


async def graceful_deregister(
    frontend: FrontendClient, node_id: str, supervisor: Supervisor, drain_timeout_s: float
) -> None:
    try:
        await frontend.drain(node_id)
    except Exception as exc:  # the frontend may be gone; still wait for our own backends
        log.warning("could not mark node draining: %s", exc)
    still_busy = await wait_idle(supervisor, drain_timeout_s)
    if still_busy:
        log.warning(
            "drain timeout (%gs, CORRAL_DRAIN_TIMEOUT) reached with busy backends: %s",
            drain_timeout_s,
            ", ".join(still_busy),
        )
    await frontend.deregister(node_id)
