"""Backend process supervisor: one backend process per `model#replica` key.

A backend is an installed directory (corral.gallery): the process is `run.sh --addr HOST:PORT` with
cwd = that directory and LOCALAI_GRPC_AUTH_TOKEN in its environment (reference §1.3); the built-in
engines are backends of the same registry, so there is one spawn path.

A process is READY only after its gRPC Health answered OK. If it dies while starting, the
error carries its last output lines. Its stdout and stderr go, line by line, to the worker's
bounded per-key log (`backend_logs`), which operators read and follow over NATS. Each process leads its own process group and is stopped as a
group, so a run.sh that starts its server without `exec` (as the reference's do) leaves nothing
behind. run.sh gets PR_SET_PDEATHSIG so it dies with the worker even on SIGKILL (what it started
relies on its own parent watch then, as the reference's backends do).
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import enum
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from corral.backends.model_root import MODELS_ROOT_ENV
from corral.gallery.registry import BackendRegistry, InstalledBackend
from corral.proto import backend_pb2, backend_pb2_grpc
from corral.worker.backend_logs import BackendLogs
from corral.worker.ports import PortAllocator

log = logging.getLogger(__name__)

READINESS_POLL_S = 0.2
READINESS_PROBE_TIMEOUT_S = 2.0
FREE_TIMEOUT_S = 5.0
STOP_GRACE_S = 5.0
STDERR_TAIL_LINES = 20
STREAM_CHUNK_BYTES = 65536
_SHELL = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"  # reference run.sh files are bash
PYTHON_ENV = "CORRAL_PYTHON"  # the worker's interpreter, for the built-in backends' run.sh


class BackendState(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    STOPPED = "stopped"


class BackendStartFailed(Exception):
    """A backend process exited or never answered Health; the message carries its last output lines."""


WILDCARD_HOSTS = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}  # bind host -> host to dial


BUSY_PORT_ATTEMPTS = 3
PORT_IN_USE_MARK = "is the port already in use?"  # what `corral backend` prints when it cannot bind (server.py)


class PortBusy(BackendStartFailed):
    """The backend exited because another process holds its port: the supervisor tries another port."""

    def __init__(self, message: str, port: int) -> None:
        super().__init__(message)
        self.port = port


def host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass
class BackendProcess:
    key: str
    backend: str
    port: int
    process: asyncio.subprocess.Process
    host: str = "0.0.0.0"  # where it listens: the worker's serve host
    directory: Path | None = None  # the backend directory it was started from
    identity: tuple[int, int] | None = None  # (device, inode) of that directory at start
    state: BackendState = BackendState.STARTING
    stderr_tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=200))
    _reader: asyncio.Task[None] | None = None
    _out_reader: asyncio.Task[None] | None = None

    @property
    def dial_host(self) -> str:
        """The host this worker dials the backend on: loopback for a wildcard bind, else the bind host."""
        return WILDCARD_HOSTS.get(self.host, self.host)

    @property
    def local_address(self) -> str:
        return host_port(self.dial_host, self.port)

    def alive(self) -> bool:
        return self.process.returncode is None


def _set_pdeathsig() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _signal_group(proc: BackendProcess, sig: int) -> None:
    """Signal the backend's process group: run.sh and whatever it started (reference run.sh files do not exec)."""
    try:
        os.killpg(proc.process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


async def _reap_group(proc: BackendProcess) -> None:
    """After run.sh exited: give what it started STOP_GRACE_S to exit on the SIGTERM it got, then kill it."""
    pgid = proc.process.pid
    deadline = time.monotonic() + STOP_GRACE_S
    while _group_alive(pgid) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    if _group_alive(pgid):
        _signal_group(proc, signal.SIGKILL)
        for _ in range(20):
            if not _group_alive(pgid):
                break
            await asyncio.sleep(0.05)


# A probe that runs before the backend has bound its port must not wait out gRPC's ~1 s reconnect backoff.
_PROBE_CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 200),
]


async def _probe_health(address: str, token: str, timeout_s: float) -> bool:
    metadata = (("authorization", f"Bearer {token}"),) if token else None
    async with grpc.aio.insecure_channel(address, options=_PROBE_CHANNEL_OPTIONS) as channel:
        stub = backend_pb2_grpc.BackendStub(channel)
        try:
            reply = await stub.Health(backend_pb2.HealthMessage(), timeout=timeout_s, metadata=metadata)
        except grpc.aio.AioRpcError:
            return False
        return reply.message == b"OK"


class Supervisor:
    def __init__(self, ports: PortAllocator, *, bind_host: str, token: str, start_timeout_s: float,
                 models_root: Path | None = None, registry: BackendRegistry | None = None,
                 logs: BackendLogs | None = None) -> None:
        self.ports = ports
        self.registry = registry or BackendRegistry(Path("backends").resolve())
        self.logs = logs if logs is not None else BackendLogs()
        self.models_root = models_root
        self.bind_host = bind_host
        self.token = token
        self.start_timeout_s = start_timeout_s
        self.processes: dict[str, BackendProcess] = {}
        self._locks: dict[str, asyncio.Lock] = collections.defaultdict(asyncio.Lock)

    async def _installed(self, backend: str | InstalledBackend) -> InstalledBackend:
        if isinstance(backend, InstalledBackend):
            return backend
        found = await asyncio.to_thread(self.registry.find, backend)
        if found is None:
            raise BackendStartFailed(f"backend {backend!r} is not installed under {self.registry.backends_path} "
                                     "(nor the system or built-in backends)")
        return found

    @staticmethod
    def _same_install(proc: BackendProcess, installed: InstalledBackend) -> bool:
        """A process is reused only for the same backend whose directory was not replaced since it started."""
        try:
            return proc.directory == installed.directory and proc.identity == installed.identity()
        except OSError:
            return False

    async def ensure(self, key: str, backend: str | InstalledBackend) -> BackendProcess:
        """Start (or reuse a live, matching) backend process for `key` and wait until it is READY."""
        installed = await self._installed(backend)
        async with self._locks[key]:
            current = self.processes.get(key)
            if (current and current.alive() and installed.answers_to(current.backend)
                    and self._same_install(current, installed) and current.state is BackendState.READY):
                if await _probe_health(current.local_address, self.token, READINESS_PROBE_TIMEOUT_S):
                    return current
                # Frozen or wedged (a frontend dropped it after a failed probe): replace it, do not reuse it.
                log.warning("backend %s for %s (pid %d) does not answer Health; replacing it", installed.name, key,
                            current.process.pid)
                await self._stop(current, force=True, kill=True)  # a wedged process would not heed SIGTERM
                return await self._start(key, installed)
            if current:
                await self._stop(current, force=False)
            return await self._start(key, installed)

    async def _start(self, key: str, backend: InstalledBackend) -> BackendProcess:
        """Start a backend; a port some other process holds is set aside and the next one tried."""
        for _attempt in range(BUSY_PORT_ATTEMPTS - 1):
            try:
                return await self._start_on(key, backend, self.ports.allocate(key))
            except PortBusy as busy:
                log.warning("backend %s for %s could not listen on port %d (held by another process); "
                            "trying another port", backend.name, key, busy.port)
                self.ports.set_aside_busy(key, busy.port)
        return await self._start_on(key, backend, self.ports.allocate(key))

    async def _start_on(self, key: str, backend: InstalledBackend, port: int) -> BackendProcess:
        env = dict(os.environ)
        env[PYTHON_ENV] = sys.executable
        if self.token:
            env["LOCALAI_GRPC_AUTH_TOKEN"] = self.token
        if self.models_root is not None:
            env[MODELS_ROOT_ENV] = str(self.models_root)  # LoadModel opens files only below it
        run_file = str(backend.run_file)
        argv = [run_file] if os.access(run_file, os.X_OK) else [_SHELL, run_file]  # lost its mode bits
        argv += ["--addr", host_port(self.bind_host, port)]
        try:
            identity = backend.identity()
            process = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=env, cwd=backend.directory, preexec_fn=_set_pdeathsig,
                start_new_session=True,  # its own process group: a run.sh that does not exec is stopped whole
            )
        except OSError as exc:
            self.ports.release(key, port)
            raise BackendStartFailed(f"cannot start backend {backend.name!r} for {key}: {exc}") from None
        proc = BackendProcess(key, backend.name, port, process, self.bind_host, directory=backend.directory,
                              identity=identity)
        self.logs.started(key, backend.name)
        self.logs.append(key, "stderr", f"[corral worker] starting backend {backend.name!r} on port {port} "
                                        f"(pid {process.pid})")
        proc._reader = asyncio.create_task(self._read_stream(proc, "stderr"), name=f"stderr:{key}")
        proc._out_reader = asyncio.create_task(self._read_stream(proc, "stdout"), name=f"stdout:{key}")
        self.processes[key] = proc
        try:
            await self._wait_ready(proc)
        except BackendStartFailed as exc:
            await self._stop(proc, force=True)
            if PORT_IN_USE_MARK in str(exc):
                raise PortBusy(str(exc), port) from None
            raise
        proc.state = BackendState.READY
        log.info("backend %s for %s ready on port %d (pid %d)", backend.name, key, port, process.pid)
        return proc

    async def _read_stream(self, proc: BackendProcess, name: str) -> None:
        stream = proc.process.stderr if name == "stderr" else proc.process.stdout
        if stream is None:
            return
        while True:
            try:
                line = await stream.readline()
            except ValueError:  # a line over the stream limit (64 KiB): keep what was read, go on
                line = await stream.read(STREAM_CHUNK_BYTES)
            if not line:
                if name == "stderr" and self.processes.get(proc.key) is proc:
                    self.logs.ended(proc.key)
                return
            text = line.decode(errors="replace").rstrip()
            if name == "stderr":
                proc.stderr_tail.append(text)
            self.logs.append(proc.key, name, text)
            log.debug("[%s] %s", proc.key, text)

    async def _wait_ready(self, proc: BackendProcess) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if not proc.alive():
                if proc._reader:
                    await asyncio.wait({proc._reader}, timeout=1.0)
                if proc._out_reader:
                    await asyncio.wait({proc._out_reader}, timeout=1.0)
                tail = "\n".join(self.logs.tail(proc.key, STDERR_TAIL_LINES))
                raise BackendStartFailed(
                    f"backend {proc.backend!r} for {proc.key} exited with code {proc.process.returncode} "
                    f"while starting; last output lines:\n{tail}"
                )
            if await _probe_health(proc.local_address, self.token, READINESS_PROBE_TIMEOUT_S):
                return
            await asyncio.sleep(READINESS_POLL_S)
        raise BackendStartFailed(
            f"backend {proc.backend!r} for {proc.key} did not answer gRPC Health within "
            f"{self.start_timeout_s:g}s; raise LOCALAI_BACKEND_START_TIMEOUT (--backend-start-timeout)"
        )

    async def _free(self, proc: BackendProcess) -> bool:
        metadata = (("authorization", f"Bearer {self.token}"),) if self.token else None
        try:
            async with grpc.aio.insecure_channel(proc.local_address) as channel:
                stub = backend_pb2_grpc.BackendStub(channel)
                await stub.Free(backend_pb2.HealthMessage(), timeout=FREE_TIMEOUT_S, metadata=metadata)
            return True
        except grpc.aio.AioRpcError:
            return False

    async def _stop(self, proc: BackendProcess, *, force: bool, kill: bool = False) -> bool:
        """Free (unless forced), terminate (or `kill` at once), wait for exit, release the port. Returns whether
        Free worked."""
        proc.state = BackendState.STOPPING
        freed = False
        if proc.alive() and not force:
            freed = await self._free(proc)
        if proc.alive() and kill:
            _signal_group(proc, signal.SIGKILL)
            await proc.process.wait()
        if proc.alive():
            _signal_group(proc, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.process.wait(), STOP_GRACE_S)
            except TimeoutError:
                _signal_group(proc, signal.SIGKILL)
                await proc.process.wait()
        await _reap_group(proc)
        readers = {task for task in (proc._reader, proc._out_reader) if task is not None}
        if readers:
            await asyncio.wait(readers, timeout=1.0)
        self.logs.append(proc.key, "stderr", f"[corral worker] backend exited with code {proc.process.returncode}")
        self.logs.ended(proc.key)
        proc.state = BackendState.STOPPED
        self.ports.release(proc.key, proc.port)
        if self.processes.get(proc.key) is proc:
            del self.processes[proc.key]
        return freed

    async def stop_key(self, key: str, *, force: bool = False) -> tuple[bool, bool]:
        """Stop the exact process of `key`. Returns (matched, freed)."""
        async with self._locks[key]:
            proc = self.processes.get(key)
            if proc is None:
                return False, False
            return True, await self._stop(proc, force=force)

    def keys_of_backend(self, names: set[str]) -> list[str]:
        """Keys of every process started for one of `names` (a backend's name and alias)."""
        return [key for key, proc in self.processes.items() if proc.backend in names]

    def resolve(self, name: str) -> list[str]:
        """Keys matched by a backend.stop target: an exact `model#replica` key, a model id or a backend name."""
        if not name:
            return list(self.processes)
        if name in self.processes:
            return [name]
        return [
            key for key, proc in self.processes.items()
            if key.rpartition("#")[0] == name or proc.backend == name
        ]

    async def stop_all(self, *, force: bool = False) -> None:
        await asyncio.gather(*(self.stop_key(key, force=force) for key in list(self.processes)))
