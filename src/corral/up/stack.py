"""`corral up`: the embedded default — PostgreSQL, NATS, one frontend and N workers on this machine.

Every part is a child process running the same distributed code a real cluster runs. Ctrl-C
or SIGTERM stops them in order: workers (which stop their backends), frontend, NATS,
PostgreSQL. Children also get PR_SET_PDEATHSIG, so a killed `corral up` takes them along.

The embedded PostgreSQL and NATS get generated credentials (kept 0600 in the data directory and
reused on the next start: `postgres-password`, `nats-password`); PostgreSQL keeps fsync on.
Children receive the URLs with those credentials through their environment, never argv.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from corral.config.settings import load
from corral.config.up import UpSettings
from corral.runtime.processes import port_open, stop_process
from corral.up.approval import ApprovalError, NodeApprover
from corral.up.embedded import (
    EmbeddedNats,
    EmbeddedPostgres,
    EmbeddedServiceError,
    embedded_nats,
    embedded_postgres,
    write_private,
)

READY_TIMEOUT_S = 120.0
WORKER_WITHHELD_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
STOP_TIMEOUT_S = 45.0
WORKER_PORT_STRIDE = 1000  # worker i owns gRPC ports [base + i*1000, base + i*1000 + 998]
DEFAULT_CHAT_MODEL = "gemma-3-270m"


def default_data_dir() -> Path:
    if os.geteuid() == 0:
        return Path("/var/lib/corral")
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "corral"


@dataclass
class Child:
    name: str
    address: str
    popen: subprocess.Popen[bytes]
    log_path: Path


def _pdeathsig_term() -> None:
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)


@dataclass
class Stack:
    args: UpSettings
    data_dir: Path
    marker: str = field(default_factory=lambda: secrets.token_hex(8))
    pg: EmbeddedPostgres | None = None
    nats: EmbeddedNats | None = None
    children: list[Child] = field(default_factory=list)
    stopping: bool = False

    def _spawn(
        self, name: str, address: str, argv: list[str], token: str, extra_env: dict[str, str] | None = None
    ) -> Child:
        log_path = self.data_dir / "logs" / f"{name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        # Secrets go through the environment, never argv: command lines are world-readable.
        env = {
            **os.environ,
            "CORRAL_UP_ID": self.marker,
            "LOCALAI_REGISTRATION_TOKEN": token,
            **(extra_env or {}),
        }
        if argv[0] == "worker":  # hub credentials stay with the frontend (controller); workers never see them
            for secret in WORKER_WITHHELD_ENV:
                env.pop(secret, None)
        with open(log_path, "ab") as log:
            popen = subprocess.Popen(
                [sys.executable, "-m", "corral", *argv],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
                preexec_fn=_pdeathsig_term,
            )
        child = Child(name, address, popen, log_path)
        self.children.append(child)
        return child

    def _wait_ready(self, child: Child, url: str) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline and not self.stopping:
            if child.popen.poll() is not None:
                tail = child.log_path.read_text(errors="replace").strip().splitlines()[-5:]
                raise EmbeddedServiceError(
                    f"{child.name} exited with code {child.popen.returncode}; "
                    f"see {child.log_path}:\n  " + "\n  ".join(tail)
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=1.0).status_code == 200:
                    return
            time.sleep(0.1)
        if not self.stopping:
            raise EmbeddedServiceError(
                f"{child.name} was not ready at {url} within {READY_TIMEOUT_S:g}s; see {child.log_path}"
            )

    def _token(self) -> str:
        return _secret(self.data_dir / "registration-token")

    def start(self) -> None:
        args = self.args
        self.data_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.data_dir, 0o755)
        token = self._token()
        admin_key, admin_key_is_new = _admin_key(self.data_dir / "admin-key")
        database_url = args.database_url or os.environ.get("LOCALAI_AUTH_DATABASE_URL")
        if not database_url:
            self.pg = embedded_postgres(
                self.data_dir / "postgres", password=_secret(self.data_dir / "postgres-password")
            )
            self.pg.start()
            database_url = self.pg.create_database("corral")
        print(f"postgres   {_redact(database_url)}", flush=True)
        nats_url = args.nats_url or os.environ.get("LOCALAI_NATS_URL")
        if not nats_url:
            self.nats = embedded_nats(
                self.data_dir / "nats", password=_secret(self.data_dir / "nats-password")
            )
            self.nats.start()
            nats_url = self.nats.url
        print(f"nats       {_redact(nats_url)}", flush=True)
        services = {"LOCALAI_AUTH_DATABASE_URL": database_url, "LOCALAI_NATS_URL": nats_url}
        models = (args.models_path or self.data_dir / "models").resolve()
        if not args.no_default_models and args.models_path is None:
            from corral.models.defaults import prepare_default_models

            print("models     preparing default models (first run: a few seconds) ...", flush=True)
            prepare_default_models(models)
        print(f"models     {models}", flush=True)
        frontend_url = f"http://{args.host}:{args.port}"
        if port_open(args.host, args.port):
            raise EmbeddedServiceError(f"port {args.port} is already in use; pass --port to choose another")
        frontend = self._spawn(
            "frontend",
            frontend_url,
            [
                "run",
                "--address",
                f"{args.host}:{args.port}",
                "--models-path",
                str(models),
            ],
            token,
            {"LOCALAI_BOOTSTRAP_ADMIN_KEY": admin_key, **services},
        )
        self._wait_ready(frontend, f"{frontend_url}/readyz")
        print(f"frontend   {frontend_url}   (log {frontend.log_path})", flush=True)
        if admin_key_is_new:
            print(
                f"admin key  {admin_key}   (shown once; kept in {self.data_dir / 'admin-key'}, mode 0600)",
                flush=True,
            )
        else:
            print(f"admin key  in {self.data_dir / 'admin-key'}", flush=True)
        approver = NodeApprover(frontend_url.replace("0.0.0.0", "127.0.0.1"), admin_key)
        for index in range(args.workers):
            base = args.worker_base_port + index * WORKER_PORT_STRIDE
            name = f"worker-{index + 1}"
            worker = self._spawn(
                name,
                f"127.0.0.1:{base}",
                [
                    "worker",
                    "--register-to",
                    frontend_url.replace("0.0.0.0", "127.0.0.1"),
                    "--node-name",
                    f"{os.uname().nodename}-{name}",
                    "--serve-addr",
                    f"127.0.0.1:{base}",
                    "--advertise-addr",
                    f"127.0.0.1:{base}",
                    "--grpc-max-port",
                    str(base + WORKER_PORT_STRIDE - 2),
                    "--http-addr",
                    f"127.0.0.1:{base - 1}",
                    "--models-path",
                    str(self.data_dir / name / "models"),
                    "--backends-path",
                    str(self.data_dir / name / "backends"),  # gallery installs stay in the data dir
                ],
                token,
                {"LOCALAI_NATS_URL": nats_url},
            )
            approver.approve_own(
                worker, f"{os.uname().nodename}-{name}", f"127.0.0.1:{base}", lambda: self.stopping
            )
            self._wait_ready(worker, f"http://127.0.0.1:{base - 1}/readyz")
            print(
                f"{name:<10} grpc 127.0.0.1:{base}+  files 127.0.0.1:{base - 1}   (log {worker.log_path})",
                flush=True,
            )
        body = json.dumps(
            {
                "model": DEFAULT_CHAT_MODEL,
                "messages": [{"role": "user", "content": "Hello!"}],
                "max_tokens": 32,
            },
            separators=(",", ":"),
        )
        print(
            f"\nready. try:\n  curl {frontend_url}/v1/chat/completions -H 'Content-Type: application/json' "
            f"-d '{body}'\n(Ctrl-C stops everything)",
            flush=True,
        )

    def first_dead_child(self) -> Child | None:
        return next((c for c in self.children if c.popen.poll() is not None), None)

    def stop(self) -> None:
        self.stopping = True
        for child in reversed(self.children):  # workers first (they stop their backends), then the frontend
            stop_process(child.popen, STOP_TIMEOUT_S)
        if self.nats:
            self.nats.stop()
        if self.pg:
            self.pg.stop(quiet=True)


def _secret(path: Path) -> str:
    """The secret kept in `path` (0600), generated on first start and reused after."""
    if path.exists():
        path.chmod(0o600)
        return path.read_text().strip()
    value = secrets.token_urlsafe(24)
    write_private(path, value)
    return value


def _admin_key(path: Path) -> tuple[str, bool]:
    """The stack's admin key: read from `path`, or generated (and stored 0600) on first start."""
    if path.exists():
        return path.read_text().strip(), False
    from corral.store.api_keys import new_key

    key = new_key()
    write_private(path, key)
    return key, True


def _redact(url: str) -> str:
    """A PostgreSQL or NATS URL without its password."""
    from corral.store.db import redact

    return redact(url)


def main(argv: list[str]) -> int:
    args = load(UpSettings, "corral up", __doc__ or "", argv)
    stack = Stack(args=args, data_dir=(args.data_dir or default_data_dir()).resolve())
    stop_requested = False

    def on_signal(_signum: int, _frame: object) -> None:
        nonlocal stop_requested
        stop_requested = True
        stack.stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    code = 0
    try:
        stack.start()
        while not stop_requested:
            dead = stack.first_dead_child()
            if dead is not None:
                print(
                    f"corral up: {dead.name} exited with code {dead.popen.returncode}; see {dead.log_path}; "
                    "stopping everything",
                    file=sys.stderr,
                )
                code = 1
                break
            time.sleep(0.2)
    except (EmbeddedServiceError, ApprovalError, OSError, subprocess.CalledProcessError) as exc:
        if not stop_requested:
            print(f"corral up: {exc}", file=sys.stderr)
            code = 1
    finally:
        print("stopping ...", flush=True)
        stack.stop()
        print("stopped.", flush=True)
    return code
