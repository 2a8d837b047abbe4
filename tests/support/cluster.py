"""Start real corral processes for end-to-end tests: a frontend and workers, on free ports."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from corral.runtime.loopwatch import SLOW_CALLBACK_ENV, stalls_in_log
from corral.runtime.processes import stop_process

SLOW_CALLBACK_MS = (
    100  # every frontend and worker of a test logs loop stalls over this; the test fails on one
)


_STRIDE = 41  # ports between two handed-out bases: a worker's backends take base, base+1, ... upward
_handed_out = itertools.count()


def free_stable_base(low: int = 20000, high: int = 31000) -> int:
    """A port p below the kernel's ephemeral range (32768+ here) such that p and p-1 are free: for a process that
    binds them seconds later (a worker's base port and file server), no outgoing connection can take either
    meanwhile. Successive calls in one test process start _STRIDE ports apart, so two workers started together
    never get the same pair."""
    span = high - low
    start = os.getpid() * 13 + next(_handed_out) * _STRIDE
    for step in range(0, span, 7):
        port = low + 1 + (start + step) % (span - 1)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port - 1))
                b.bind(("127.0.0.1", port))
        except OSError:
            continue
        return port
    raise RuntimeError(f"no free port pair in {low}-{high}")


def free_port_pair() -> int:
    """A port p such that p and p-1 are both free (worker base port and its file server), below the ephemeral
    range: a port the kernel picked could be taken by an outgoing connection before the worker binds it (seen:
    'file server: Address already in use')."""
    return free_stable_base()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout_s: float = 20.0) -> int | None:
        return stop_process(self.popen, timeout_s)


def spawn(name: str, argv: list[str], log_dir: Path, env: dict[str, str] | None = None) -> Proc:
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    with open(log_path, "wb") as handle:  # the child keeps its own descriptor
        popen = subprocess.Popen(
            [sys.executable, "-m", "corral", *argv],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, SLOW_CALLBACK_ENV: str(SLOW_CALLBACK_MS), **(env or {})},
            start_new_session=True,
        )
    return Proc(name, popen, log_path)


def wait_http(url: str, proc: Proc, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.log()[-3000:]}")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.stop()  # never leave a half-started process behind
    raise RuntimeError(f"{proc.name} not ready at {url} after {timeout_s}s:\n{proc.log()[-3000:]}")


@dataclass
class Cluster:
    root: Path
    database_url: str
    nats_url: str
    token: str = "test-token"
    admin_key: str = "corral-test-admin-key"
    auto_approve: bool = True
    frontend_env: dict[str, str] = field(default_factory=dict)
    worker_env: dict[str, str] = field(default_factory=dict)  # also the backends' (workers pass their env on)
    frontend: Proc | None = None
    frontend_url: str = ""
    workers: list[Proc] = field(default_factory=list)
    worker_ports: list[int] = field(default_factory=list)
    others: list[Proc] = field(
        default_factory=list
    )  # frontends from spawn_frontend, checked for stalls at stop
    fail_on_loop_stalls: bool = True  # benchmarks saturate the loop on purpose: they report, not fail
    # Workers keep no spare backend process unless a test asks (most run the simulator; a llama-cpp spare per
    # worker would only add CPU): `--backend-prestart` as the worker's default is tested on its own.
    backend_prestart: str = ""

    @property
    def models_dir(self) -> Path:
        return self.root / "frontend-models"

    def start_frontend(self, *extra: str) -> None:
        self.frontend, self.frontend_url = self.spawn_frontend("frontend", *extra)

    def spawn_frontend(self, name: str, *extra: str) -> tuple[Proc, str]:
        """Another frontend on the same database, NATS and models directory."""
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = spawn(
            name,
            [
                "run",
                "--address",
                f"127.0.0.1:{port}",
                "--nats-url",
                self.nats_url,
                "--database-url",
                self.database_url,
                "--registration-token",
                self.token,
                *(["--auto-approve-nodes"] if self.auto_approve else []),
                "--models-path",
                str(self.models_dir),
                *extra,
            ],
            self.root / "logs",
            env={"LOCALAI_BOOTSTRAP_ADMIN_KEY": self.admin_key, **self.frontend_env},
        )
        self.others.append(proc)
        wait_http(f"{url}/readyz", proc)
        return proc, url

    @property
    def admin_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_key}"}

    def worker_argv(self, name: str, base_port: int, token: str | None = None) -> list[str]:
        return [
            "worker",
            "--register-to",
            self.frontend_url,
            "--nats-url",
            self.nats_url,
            "--registration-token",
            self.token if token is None else token,
            "--node-name",
            name,
            "--serve-addr",
            f"127.0.0.1:{base_port}",
            "--advertise-addr",
            f"127.0.0.1:{base_port}",
            "--http-addr",
            f"127.0.0.1:{base_port - 1}",
            "--models-path",
            str(self.root / name / "models"),
            "--backends-path",
            str(self.root / name / "backends"),
            "--heartbeat-interval",
            "2s",
            "--log-level",
            "debug",
            f"--backend-prestart={self.backend_prestart}",
        ]

    def node_token(self, name: str) -> str:
        """The node credential worker `name` keeps in its state dir (`.corral-worker` next to its models)."""
        import json

        path = self.root / name / ".corral-worker" / f"node-credential-{name}.json"
        return str(json.loads(path.read_text())["node_token"])

    def node_headers(self, name: str) -> dict[str, str]:
        """What worker `name` sends on `/api/node/<id>/*`: the registration token and its own credential."""
        return {"Authorization": f"Bearer {self.token}", "X-Node-Token": self.node_token(name)}

    def start_worker(self, name: str, *extra: str) -> Proc:
        base = free_port_pair()
        proc = spawn(name, [*self.worker_argv(name, base), *extra], self.root / "logs", env=self.worker_env)
        wait_http(f"http://127.0.0.1:{base - 1}/readyz", proc)
        self.workers.append(proc)
        self.worker_ports.append(base)
        return proc

    def serving(self, *workers: str, frontend_args: tuple[str, ...] = ()) -> Iterator[Cluster]:
        """A module fixture's body: start the frontend and `workers`, yield, stop all (`yield from c.serving("w1")`)."""
        try:
            self.start_frontend(*frontend_args)
            for name in workers:
                self.start_worker(name)
            yield self
        finally:
            self.stop()

    def stop(self) -> None:
        for proc in self.workers:
            proc.stop()
        if self.frontend:
            self.frontend.stop()
        if self.fail_on_loop_stalls:
            assert_no_loop_stalls([*self.workers, *self.others])


def assert_no_loop_stalls(procs: list[Proc]) -> None:
    """Fail when a process's event loop computed for over SLOW_CALLBACK_MS without yielding."""
    found = {proc.name: stalls for proc in procs if (stalls := stalls_in_log(proc.log(), SLOW_CALLBACK_MS))}
    if found:
        lines = "\n".join(f"{name}: {line}" for name, stalls in found.items() for line in stalls)
        raise AssertionError(
            f"event loop stalls over {SLOW_CALLBACK_MS} ms ({SLOW_CALLBACK_ENV}), each after "
            f"the stack that blocked when the watchdog caught it:\n{lines}"
        )
