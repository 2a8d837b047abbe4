"""Backend processes for tests: `python -m corral.backends.main NAME --addr ...` started, probed and called
over gRPC (tests/integration/backends)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import grpc
import pytest

from corral.proto import backend_pb2 as pb
from corral.proto import backend_pb2_grpc
from corral.runtime.processes import stop_process

HEALTH_DEADLINE_S = 30.0
# Without these a probe that races the backend's bind waits out gRPC's 1 s reconnect backoff.
FAST_RECONNECT = [
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 200),
]
SENTINEL = "model identity mismatch"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def backend_command(name: str, port: int) -> list[str]:
    return [sys.executable, "-m", "corral.backends.main", name, "--addr", f"127.0.0.1:{port}"]


def backend_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LOCALAI_GRPC_AUTH_TOKEN"}
    env.update(extra)
    return env


@dataclass
class Backend:
    process: subprocess.Popen[bytes]
    port: int
    stub: backend_pb2_grpc.BackendStub
    channel: grpc.Channel
    startup_s: float
    stderr: BinaryIO
    token: str = ""

    def auth(self) -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {self.token}")] if self.token else []

    def stderr_text(self) -> str:
        return read_all(self.stderr)


def read_all(stream: BinaryIO | None) -> str:
    if stream is None:
        return ""
    stream.seek(0)
    return stream.read().decode(errors="replace")


def wait_healthy(
    stub: backend_pb2_grpc.BackendStub,
    process: subprocess.Popen[bytes],
    metadata: Sequence[tuple[str, str]],
    stderr: BinaryIO | None = None,
) -> None:
    deadline = time.monotonic() + HEALTH_DEADLINE_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"backend exited {process.returncode}: {read_all(stderr)}")
        try:
            if stub.Health(pb.HealthMessage(), timeout=2, metadata=metadata).message == b"OK":
                return
        except grpc.RpcError:
            time.sleep(0.05)
    raise AssertionError("backend did not answer Health within 30s")


@contextmanager
def running_backend(name: str, tmp_path: Path, token: str = "", **env: str) -> Iterator[Backend]:
    port = free_port()
    if token:
        env["LOCALAI_GRPC_AUTH_TOKEN"] = token
    stderr = open(tmp_path / f"{name}-{port}.stderr", "w+b")
    started = time.perf_counter()
    process = subprocess.Popen(backend_command(name, port), env=backend_env(**env), stderr=stderr)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=FAST_RECONNECT)
    stub = backend_pb2_grpc.BackendStub(channel)
    try:
        wait_healthy(stub, process, [("authorization", f"Bearer {token}")] if token else [], stderr)
        yield Backend(process, port, stub, channel, time.perf_counter() - started, stderr, token)
    finally:
        channel.close()
        stop_process(process)
        stderr.close()


def rpc_error(call: Callable[..., object], *args: object, **kwargs: object) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        result = call(*args, timeout=30, **kwargs)
        if hasattr(result, "__iter__") and not isinstance(result, pb.Reply):
            list(result)
    return caught.value


def load(backend: Backend, model: str, **fields: Any) -> pb.Result:
    result: pb.Result = backend.stub.LoadModel(
        pb.ModelOptions(Model=model, **fields), timeout=60, metadata=backend.auth()
    )
    return result
