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

Spare processes (`--backend-prestart`): a backend's process does not depend on the model it will
serve (its port, token and environment are the worker's), so the worker keeps one started, READY
process of each named backend. A cold load takes it instead of paying the interpreter's start while
its files stage on the same CPUs; a new spare starts once the worker has started nothing for
SPARE_REFILL_DELAY_S, so the refill never competes with the load that took the last one. Spares are
not replicas: they are absent from `processes` (lists, drain, readiness) and stopped with the worker,
or when their backend is upgraded or deleted.

A READY process a load would reuse is judged before it is (`liveness`): reused once it answers Health within
CORRAL_BACKEND_STALL_WINDOW, replaced only when it neither answered nor made progress for that long, and kept
(the load told so) when it computes without answering. Busy is not wedged.
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import enum
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from corral.backends.model_root import MODELS_ROOT_ENV
from corral.config.parse import format_duration_s
from corral.gallery.registry import BackendRegistry, InstalledBackend
from corral.proto import backend_pb2, backend_pb2_grpc
from corral.worker import liveness
from corral.worker.backend_logs import BackendLogs
from corral.worker.liveness import Liveness, Verdict, busy_message, judge
from corral.worker.ports import PortAllocator, PortRangeExhausted

log = logging.getLogger(__name__)

SPARE_KEY_PREFIX = "spare:"
SPARE_REFILL_DELAY_S = 10.0  # quiet time (no backend started) before a taken spare is replaced
SPARE_MAX_DEATHS = 3  # a spare that exits on its own this many times in a row is not started again
READINESS_POLL_S = 0.2  # after an answer that is not OK yet
READINESS_WAIT_S = 0.25  # one wait for the port to open, between checks that the process still lives
READY_REDIAL_MS = 10
READINESS_PROBE_TIMEOUT_S = 2.0
FREE_TIMEOUT_S = 5.0
STALL_WINDOW_S = 10.0  # CORRAL_BACKEND_STALL_WINDOW: no Health answer and no progress this long = wedged
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
PORT_IN_USE_MARK = (
    "is the port already in use?"  # what `corral backend` prints when it cannot bind (server.py)
)


class BackendBusy(BackendStartFailed):
    """The process of the key answers no Health but makes progress: it was kept, not replaced; try again later."""


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
    liveness: Liveness = field(default_factory=Liveness.started)  # what the worker last saw it answer and do
    _reader: asyncio.Task[None] | None = None
    _out_reader: asyncio.Task[None] | None = None
    # a spare's: the channel its readiness was seen on, kept open for the probe that hands it over (a new channel
    # there costs its connect, ~3 ms of a cold start)
    health_channel: grpc.aio.Channel | None = None

    @property
    def dial_host(self) -> str:
        """The host this worker dials the backend on: loopback for a wildcard bind, else the bind host."""
        return WILDCARD_HOSTS.get(self.host, self.host)

    @property
    def local_address(self) -> str:
        return host_port(self.dial_host, self.port)

    @property
    def pid(self) -> int:
        """The process the worker started (run.sh), leader of the backend's process group."""
        return self.process.pid

    def alive(self) -> bool:
        return self.process.returncode is None


# With setpriv (util-linux) the kernel's parent-death signal is set by an exec'd helper, so the spawn passes no
# preexec_fn and Python can vfork: a fork() of this threaded process ran gRPC's fork handlers in the child, whose
# restarted poller thread then met the epoll descriptor closed by close_fds and aborted the child before its exec
# (a backend "exited with code -6 while starting", seen under load). Without setpriv: the preexec_fn, as before.
_SETPRIV = shutil.which("setpriv")


def _spawn_argv(argv: list[str]) -> tuple[list[str], Callable[[], None] | None]:
    """The command that starts a backend with SIGKILL as its parent-death signal, and the preexec_fn it needs."""
    if _SETPRIV is not None:
        return [_SETPRIV, "--pdeathsig", "KILL", "--", *argv], None
    return argv, _set_pdeathsig


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


# While a backend starts, its port is dialled every READY_REDIAL_MS until it listens (a refused connect is cheap).
_READY_CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", READY_REDIAL_MS),
    ("grpc.min_reconnect_backoff_ms", READY_REDIAL_MS),
    ("grpc.max_reconnect_backoff_ms", READY_REDIAL_MS),
    ("grpc.enable_retries", 0),
]


async def _health_ok(channel: grpc.aio.Channel, token: str, timeout_s: float) -> bool:
    metadata = (("authorization", f"Bearer {token}"),) if token else None
    try:
        reply: backend_pb2.Reply = await backend_pb2_grpc.BackendStub(channel).Health(
            backend_pb2.HealthMessage(), timeout=timeout_s, metadata=metadata
        )
    except grpc.aio.AioRpcError:
        return False
    return reply.message == b"OK"


async def _probe_health(address: str, token: str, timeout_s: float) -> bool:
    async with grpc.aio.insecure_channel(address, options=_PROBE_CHANNEL_OPTIONS) as channel:
        return await _health_ok(channel, token, timeout_s)


class Supervisor:
    def __init__(
        self,
        ports: PortAllocator,
        *,
        bind_host: str,
        token: str,
        start_timeout_s: float,
        models_root: Path | None = None,
        registry: BackendRegistry | None = None,
        logs: BackendLogs | None = None,
        prestart: tuple[str, ...] = (),
        stall_window_s: float = STALL_WINDOW_S,
    ) -> None:
        self.ports = ports
        self.registry = registry or BackendRegistry(Path("backends").resolve())
        self.logs = logs if logs is not None else BackendLogs()
        self.models_root = models_root
        self.bind_host = bind_host
        self.token = token
        self.start_timeout_s = start_timeout_s
        self.stall_window_s = stall_window_s
        self.processes: dict[str, BackendProcess] = {}
        self._locks: dict[str, asyncio.Lock] = collections.defaultdict(asyncio.Lock)
        self.prestart = prestart  # backend names kept as a started spare process
        self.spares: dict[str, BackendProcess] = {}  # configured name -> READY spare
        self._spare_starts: dict[str, asyncio.Task[BackendProcess | None]] = {}
        self._spare_deaths: dict[str, int] = {}  # exits on their own in a row, per name (reset by a handover)
        self._spare_reaps: set[asyncio.Task[None]] = set()
        self._last_start_s = time.monotonic()
        self._stopping = False

    async def _installed(self, backend: str | InstalledBackend) -> InstalledBackend:
        if isinstance(backend, InstalledBackend):
            return backend
        found = await asyncio.to_thread(self.registry.find, backend)
        if found is None:
            raise BackendStartFailed(
                f"backend {backend!r} is not installed under {self.registry.backends_path} "
                "(nor the system or built-in backends)"
            )
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
            if (
                current
                and current.alive()
                and installed.answers_to(current.backend)
                and self._same_install(current, installed)
                and current.state is BackendState.READY
            ):
                if await self._still_serves(current, installed.name):
                    return current
                await self._stop(current, force=True, kill=True)  # a wedged process would not heed SIGTERM
                return await self._start(key, installed)
            if current:
                await self._stop(current, force=False)
            return await self._take_spare(key, installed) or await self._start(key, installed)

    async def _still_serves(self, proc: BackendProcess, name: str) -> bool:
        """Judge a READY process a load would reuse (a frontend may have dropped it): True to reuse it, False when
        it is wedged and must be replaced; raises BackendBusy when it answers nothing but makes progress."""
        judgement = await judge(proc, self.token, self.stall_window_s)
        if judgement.verdict is Verdict.ALIVE:
            if judgement.waited_s >= liveness.SLOW_ANSWER_S:
                log.info(
                    "backend %s for %s (pid %d) answered Health after %.1fs: busy, not wedged; reused (%s)",
                    name,
                    proc.key,
                    proc.pid,
                    judgement.waited_s,
                    judgement.evidence,
                )
            return True
        if judgement.verdict is Verdict.BUSY:
            message = busy_message(name, proc.key, proc.pid, self.stall_window_s, judgement)
            log.warning("%s", message)
            raise BackendBusy(message)
        log.warning(
            "backend %s for %s (pid %d) does not answer Health and made no progress for %s (%s); "
            "replacing it",
            name,
            proc.key,
            proc.pid,
            format_duration_s(judgement.waited_s),
            judgement.evidence,
        )
        return False

    async def _start(self, key: str, backend: InstalledBackend) -> BackendProcess:
        """Start a backend; a port some other process holds is set aside and the next one tried."""
        for _attempt in range(BUSY_PORT_ATTEMPTS - 1):
            try:
                return await self._start_on(key, backend, self.ports.allocate(key))
            except PortBusy as busy:
                log.warning(
                    "backend %s for %s could not listen on port %d (held by another process); "
                    "trying another port",
                    backend.name,
                    key,
                    busy.port,
                )
                self.ports.set_aside_busy(key, busy.port)
        return await self._start_on(key, backend, self.ports.allocate(key))

    async def _start_on(
        self, key: str, backend: InstalledBackend, port: int, *, spare_of: str | None = None
    ) -> BackendProcess:
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
            spawn_argv, preexec = _spawn_argv(argv)
            process = await asyncio.create_subprocess_exec(
                *spawn_argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
                cwd=backend.directory,
                preexec_fn=preexec,
                start_new_session=True,  # its own process group: a run.sh that does not exec is stopped whole
            )
        except OSError as exc:
            self.ports.release(key, port)
            raise BackendStartFailed(f"cannot start backend {backend.name!r} for {key}: {exc}") from None
        proc = BackendProcess(
            key, backend.name, port, process, self.bind_host, directory=backend.directory, identity=identity
        )
        self.logs.started(key, backend.name)
        self.logs.append(
            key,
            "stderr",
            f"[corral worker] starting backend {backend.name!r} on port {port} (pid {process.pid})",
        )
        proc._reader = asyncio.create_task(self._read_stream(proc, "stderr"), name=f"stderr:{key}")
        proc._out_reader = asyncio.create_task(self._read_stream(proc, "stdout"), name=f"stdout:{key}")
        if spare_of is None:
            self.processes[key] = proc
        else:
            self.spares[spare_of] = proc
        try:
            await self._wait_ready(proc, keep_channel=spare_of is not None)
        except BackendStartFailed as exc:
            await self._stop(proc, force=True)
            if PORT_IN_USE_MARK in str(exc):
                raise PortBusy(str(exc), port) from None
            raise
        proc.state = BackendState.READY
        log.info("backend %s for %s ready on port %d (pid %d)", backend.name, key, port, process.pid)
        return proc

    # -- spares ------------------------------------------------------------------------------------------

    def keep_spares(self) -> None:
        """Start a spare of every --backend-prestart backend now (at worker start)."""
        for name in self.prestart:
            self._refill(name, delay_s=0.0)

    def _refill(self, name: str, *, delay_s: float) -> None:
        running = self._spare_starts.get(name)
        if self._stopping or name not in self.prestart or (running is not None and not running.done()):
            return
        self._spare_starts[name] = asyncio.create_task(self._start_spare(name, delay_s), name=f"spare:{name}")

    async def _start_spare(self, name: str, delay_s: float) -> BackendProcess | None:
        """After `delay_s` with no backend started: start the spare of `name` (None when it cannot run)."""
        while (wait_s := self._last_start_s + delay_s - time.monotonic()) > 0:
            await asyncio.sleep(wait_s)
        current = self.spares.get(name)
        if current is not None and current.alive():
            return current
        installed = await asyncio.to_thread(self.registry.find, name)
        if installed is None:
            log.warning("no spare process for backend %r: it is not installed (--backend-prestart)", name)
            return None
        key = SPARE_KEY_PREFIX + installed.name
        try:
            return await self._start_on(key, installed, self.ports.allocate(key), spare_of=name)
        except (BackendStartFailed, PortRangeExhausted) as exc:
            log.warning("spare process for backend %r did not start (loads start their own): %s", name, exc)
            return None

    async def _replace_dead_spare(self, proc: BackendProcess) -> None:
        """A READY spare exited on its own (nobody stopped it): reap it, free its port, start another after the
        quiet delay; after SPARE_MAX_DEATHS deaths in a row, stop trying and say so."""
        name = next((n for n, spare in self.spares.items() if spare is proc), None)
        await self._stop(proc, force=True)
        if name is None or self._stopping:
            return
        deaths = self._spare_deaths[name] = self._spare_deaths.get(name, 0) + 1
        if deaths >= SPARE_MAX_DEATHS:
            log.error(
                "the spare process of backend %r exited on its own %d times in a row (last code %s); no more "
                "spares of it (loads start their own); see its log under %s, or drop it from "
                "--backend-prestart",
                name,
                deaths,
                proc.process.returncode,
                proc.key,
            )
            return
        log.warning(
            "the spare process of backend %r exited on its own (code %s); another starts after %gs",
            name,
            proc.process.returncode,
            SPARE_REFILL_DELAY_S,
        )
        self._refill(name, delay_s=SPARE_REFILL_DELAY_S)

    async def _take_spare(self, key: str, installed: InstalledBackend) -> BackendProcess | None:
        """The spare of `installed` handed over to `key` (READY, same install), or None: the caller starts one."""
        self._last_start_s = time.monotonic()
        for name in self.prestart:
            starting = self._spare_starts.get(name)
            spare = self.spares.get(name)
            if spare is None or not installed.answers_to(spare.backend):
                continue
            if starting is not None and not starting.done():  # ahead of a fresh start: wait for it
                await asyncio.shield(starting)
            if self.spares.get(name) is not spare:
                continue
            del self.spares[name]
            self._refill(name, delay_s=SPARE_REFILL_DELAY_S)
            if not (
                spare.alive()
                and spare.state is BackendState.READY
                and self._same_install(spare, installed)
                and await self._answers_health(spare)
            ):
                await self._stop(spare, force=True, kill=True)
                continue
            self._spare_deaths.pop(name, None)
            self.ports.rekey(spare.port, spare.key, key)
            self.logs.rename(spare.key, key)
            spare.key = key
            self.processes[key] = spare
            log.info(
                "backend %s for %s: took the spare process on port %d (pid %d)",
                spare.backend,
                key,
                spare.port,
                spare.process.pid,
            )
            return spare
        return None

    async def drop_spares(self, names: set[str]) -> list[str]:
        """Stop the spares of a backend being upgraded or deleted (a refill starts the new install later)."""
        dropped: list[str] = []
        for name, spare in list(self.spares.items()):
            if spare.backend in names:
                starting = self._spare_starts.get(name)
                if starting is not None and not starting.done():
                    starting.cancel()
                    await asyncio.gather(starting, return_exceptions=True)
                self.spares.pop(name, None)
                await self._stop(spare, force=True)
                dropped.append(spare.key)
                self._refill(name, delay_s=SPARE_REFILL_DELAY_S)
        return dropped

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
                if name == "stderr" and (
                    self.processes.get(proc.key) is proc or proc in self.spares.values()
                ):
                    self.logs.ended(proc.key)
                    if proc.state is BackendState.READY and proc in self.spares.values():
                        task = asyncio.create_task(
                            self._replace_dead_spare(proc), name=f"spare-died:{proc.backend}"
                        )
                        self._spare_reaps.add(task)
                        task.add_done_callback(self._spare_reaps.discard)
                return
            text = line.decode(errors="replace").rstrip()
            if name == "stderr":
                proc.stderr_tail.append(text)
            self.logs.append(proc.key, name, text)
            log.debug("[%s] %s", proc.key, text)

    async def _wait_ready(self, proc: BackendProcess, *, keep_channel: bool = False) -> None:
        """Until Health answers OK: one channel that redials every READY_REDIAL_MS while the port is closed, so
        readiness is seen within a few ms of the backend listening (not at the next poll), and the process is
        checked for an early exit between waits. `keep_channel`: it stays open as `proc.health_channel`."""
        deadline = time.monotonic() + self.start_timeout_s
        metadata = (("authorization", f"Bearer {self.token}"),) if self.token else None
        channel = grpc.aio.insecure_channel(proc.local_address, options=_READY_CHANNEL_OPTIONS)
        try:
            stub = backend_pb2_grpc.BackendStub(channel)
            while (left := deadline - time.monotonic()) > 0:
                if not proc.alive():
                    await self._raise_start_failed(proc)
                try:
                    reply = await stub.Health(
                        backend_pb2.HealthMessage(),
                        timeout=min(left, READINESS_WAIT_S),
                        metadata=metadata,
                        wait_for_ready=True,
                    )
                except grpc.aio.AioRpcError as exc:
                    if exc.code() is not grpc.StatusCode.DEADLINE_EXCEEDED:
                        await asyncio.sleep(
                            READINESS_POLL_S
                        )  # answered, but not OK (still starting, or auth)
                    continue
                if reply.message == b"OK":
                    proc.liveness.answered(time.monotonic())
                    if keep_channel:
                        proc.health_channel, channel = channel, None
                    return
                await asyncio.sleep(READINESS_POLL_S)
        finally:
            if channel is not None:
                await channel.close()
        if not proc.alive():
            await self._raise_start_failed(proc)
        raise BackendStartFailed(
            f"backend {proc.backend!r} for {proc.key} did not answer gRPC Health within "
            f"{self.start_timeout_s:g}s; raise LOCALAI_BACKEND_START_TIMEOUT (--backend-start-timeout)"
        )

    async def _answers_health(self, proc: BackendProcess) -> bool:
        """Whether `proc` answers Health OK now (within READINESS_PROBE_TIMEOUT_S): asked on the channel kept from
        its start (then closed: it is no longer a spare), else on a new one."""
        channel, proc.health_channel = proc.health_channel, None
        if channel is None:
            return await _probe_health(proc.local_address, self.token, READINESS_PROBE_TIMEOUT_S)
        try:
            return await _health_ok(channel, self.token, READINESS_PROBE_TIMEOUT_S)
        finally:
            await channel.close()

    async def _raise_start_failed(self, proc: BackendProcess) -> None:
        if proc._reader:
            await asyncio.wait({proc._reader}, timeout=1.0)
        if proc._out_reader:
            await asyncio.wait({proc._out_reader}, timeout=1.0)
        tail = "\n".join(self.logs.tail(proc.key, STDERR_TAIL_LINES))
        raise BackendStartFailed(
            f"backend {proc.backend!r} for {proc.key} exited with code {proc.process.returncode} "
            f"while starting; last output lines:\n{tail}"
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
        if proc.health_channel is not None:
            channel, proc.health_channel = proc.health_channel, None
            await channel.close()
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
        self.logs.append(
            proc.key, "stderr", f"[corral worker] backend exited with code {proc.process.returncode}"
        )
        self.logs.ended(proc.key)
        proc.state = BackendState.STOPPED
        self.ports.release(proc.key, proc.port)
        if self.processes.get(proc.key) is proc:
            del self.processes[proc.key]
        for name, spare in list(self.spares.items()):
            if spare is proc:
                del self.spares[name]
        return freed

    async def stop_key(self, key: str, *, force: bool = False) -> tuple[bool, bool]:
        """Stop the exact process of `key`. Returns (matched, freed)."""
        async with self._locks[key]:
            proc = self.processes.get(key)
            if proc is None:
                return False, False
            return True, await self._stop(proc, force=force)

    def ready(self) -> list[BackendProcess]:
        """The replicas' processes that answered Health at start and are not being stopped."""
        return [proc for proc in self.processes.values() if proc.state is BackendState.READY]

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
            key
            for key, proc in self.processes.items()
            if key.rpartition("#")[0] == name or proc.backend == name
        ]

    async def stop_all(self, *, force: bool = False) -> None:
        self._stopping = True
        starts = [task for task in self._spare_starts.values() if not task.done()]
        for task in starts:
            task.cancel()
        await asyncio.gather(*starts, return_exceptions=True)
        await asyncio.gather(
            *(self.stop_key(key, force=force) for key in list(self.processes)),
            *(self._stop(spare, force=True) for spare in list(self.spares.values())),
        )
