"""Run one backend process: a `grpc.aio` server for `backend.Backend` around an `Engine`.

Binds `--addr` (plaintext), 50 MiB message limits both ways, bearer auth when
`LOCALAI_GRPC_AUTH_TOKEN` is set, graceful stop on SIGTERM/SIGINT (a second signal exits at
once), and exit when the parent process goes away (see `parent_watch`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from dataclasses import dataclass

import grpc
import grpc.aio

from corral.backends.auth import BearerAuthInterceptor, auth_token_from_env
from corral.backends.engine import Engine
from corral.backends.parent_watch import ParentWatchConfig, watch_parent
from corral.backends.servicer import BackendServicer
from corral.backends.tracing_interceptor import TracingInterceptor
from corral.lane.server import LaneServer, fast_lane_enabled
from corral.proto import backend_pb2_grpc
from corral.telemetry import tracing

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 50 * 1024 * 1024
SHUTDOWN_GRACE_S = 5.0
PARENT_GONE_GRACE_S = 1.0
THREAD_DRAIN_S = 2.0
GRPC_SERVER_OPTIONS = (
    ("grpc.max_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.so_reuseport", 0),
    # Frontends ping every CORRAL_BACKEND_KEEPALIVE during calls, also through a long silent prefill:
    # accept those pings instead of answering them with GOAWAY "too_many_pings".
    ("grpc.http2.min_ping_interval_without_data_ms", 1000),
    ("grpc.http2.max_ping_strikes", 0),  # 0: never GOAWAY for pings
)


class AddressError(ValueError):
    """A `--addr` value that is not HOST:PORT."""


@dataclass(frozen=True)
class ListenAddress:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_addr(text: str) -> ListenAddress:
    """`"127.0.0.1:50051"`, `"0.0.0.0:50051"`, `"localhost:50051"`, `"[::1]:50051"`."""
    host, sep, port_text = text.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise AddressError(
            f"--addr must be HOST:PORT with PORT in 1-65535 (e.g. 127.0.0.1:50051), got {text!r}"
        )
    return ListenAddress(host=host, port=int(port_text))


def build_server(servicer: BackendServicer, address: ListenAddress) -> grpc.aio.Server:
    """Create and bind (but do not start) the server. Raises OSError if the port is taken."""
    token = auth_token_from_env()
    interceptors: list[grpc.aio.ServerInterceptor] = [BearerAuthInterceptor(token)] if token else []
    if tracing.tracer is not None:
        interceptors.append(TracingInterceptor())
    server = grpc.aio.server(interceptors=interceptors, options=GRPC_SERVER_OPTIONS)
    backend_pb2_grpc.add_BackendServicer_to_server(servicer, server)
    try:
        bound_port = server.add_insecure_port(str(address))
    except RuntimeError as exc:
        raise OSError(f"cannot listen on {address}: {exc} (is the port already in use?)") from None
    if bound_port == 0:
        raise OSError(f"cannot listen on {address} (is the port already in use?)")
    return server


async def serve(engine: Engine, address: ListenAddress) -> int:
    """Serve until SIGTERM/SIGINT or parent death; return the process exit code."""
    servicer = BackendServicer(engine)
    server = build_server(servicer, address)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    grace_s = {"value": SHUTDOWN_GRACE_S}

    def on_signal(signum: int) -> None:
        if stop.is_set():
            log.warning("second %s: exiting now", signal.Signals(signum).name)
            os._exit(128 + signum)
        log.info("%s received: stopping (grace %.0fs)", signal.Signals(signum).name, SHUTDOWN_GRACE_S)
        stop.set()

    def on_parent_gone() -> None:
        grace_s["value"] = PARENT_GONE_GRACE_S
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    await server.start()
    lane = LaneServer(servicer, auth_token_from_env()) if fast_lane_enabled() else None
    if lane is not None:
        servicer.fast_lane_port = await lane.start(address.host)
    auth = "bearer auth on" if auth_token_from_env() else "no auth"
    lane_note = f", fast lane on port {lane.port}" if lane is not None else ""
    log.info("%s backend listening on %s (%s%s, pid %d)", engine.name, address, auth, lane_note, os.getpid())
    watcher = asyncio.create_task(watch_parent(ParentWatchConfig.from_env(), on_parent_gone))
    try:
        await stop.wait()
    finally:
        watcher.cancel()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        await asyncio.gather(
            server.stop(grace_s["value"]), *([lane.close(grace_s["value"])] if lane is not None else [])
        )
    drain_deadline = loop.time() + THREAD_DRAIN_S
    while servicer.threads_in_flight and loop.time() < drain_deadline:
        await asyncio.sleep(0.02)  # cancelled generations stop at their next token
    if servicer.threads_in_flight:
        # An engine call cannot be interrupted; do not let interpreter shutdown wait for it.
        log.warning("exiting with %d engine call(s) still running", servicer.threads_in_flight)
        os._exit(0)
    try:
        engine.free()
    except Exception:
        log.exception("engine.free during shutdown failed")
    log.info("stopped")
    return 0
