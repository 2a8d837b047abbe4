"""Shared fixtures: a real PostgreSQL (throwaway databases) and a real NATS server.

Uses CORRAL_TEST_DATABASE_URL / CORRAL_TEST_NATS_URL when set, else the services on their
default loopback ports, else starts embedded ones with the launcher `corral up` uses.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from corral.runtime.processes import port_open
from corral.up.embedded import embedded_nats, embedded_postgres

if TYPE_CHECKING:
    from corral.cli.nats_auth_setup import AuthMaterial
    from support.nats_servers import NatsServer

# CORRAL_TEST_EMBEDDED=1: ignore services on the default ports and start embedded ones (as on a bare machine).
FORCE_EMBEDDED = os.environ.get("CORRAL_TEST_EMBEDDED", "") not in ("", "0", "false")

# Every process a test starts inherits this marker, so the session can prove it leaves none behind.
SESSION_MARKER = f"CORRAL_TEST_SESSION={uuid.uuid4().hex}"
os.environ["CORRAL_TEST_SESSION"] = SESSION_MARKER.split("=", 1)[1]


def _marked_processes() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if SESSION_MARKER.encode() in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.fixture(scope="session", autouse=True)
def no_leftover_processes() -> Iterator[None]:
    """Kill (and report) any process a test started and forgot: CI must leave nothing running."""
    import signal
    import time

    yield
    deadline = time.monotonic() + 10
    while (leftovers := _marked_processes()) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in leftovers:
        try:
            cmd = (Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))[
                :120
            ]
            os.kill(pid, signal.SIGKILL)
            print(f"\nkilled leftover test process {pid}: {cmd}", file=sys.stderr)
        except (OSError, ProcessLookupError):
            pass


@pytest.fixture(scope="session")
def state_root() -> Iterator[Path]:
    """A directory the `postgres` OS user can traverse (pytest's tmp dirs are private to root)."""
    root = Path(tempfile.mkdtemp(prefix="corral-test-", dir="/var/tmp"))
    os.chmod(root, 0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_admin_url(state_root: Path) -> Iterator[str]:
    if os.environ.get("CORRAL_TEST_DATABASE_URL"):
        yield os.environ["CORRAL_TEST_DATABASE_URL"]
        return
    if port_open("127.0.0.1", 5432) and not FORCE_EMBEDDED:
        yield "postgresql://postgres@127.0.0.1:5432/postgres"
        return
    pg = embedded_postgres(
        state_root / "pg", fsync=False
    )  # throwaway databases: the suite alone turns fsync off
    pg.start()
    yield f"{pg.url_base}/postgres"
    pg.stop(quiet=True)


@pytest.fixture(scope="session")
def make_database(pg_admin_url: str) -> Iterator[Callable[[], str]]:
    """Factory: a fresh, empty database per call; all are dropped at the end of the run."""
    import asyncio

    import asyncpg

    created: list[str] = []
    base = pg_admin_url.rsplit("/", 1)[0]

    async def _admin(sql: str) -> None:
        conn = await asyncpg.connect(pg_admin_url)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    def run(sql: str) -> None:
        # A thread of its own: callers may be inside a running event loop (async tests).
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, _admin(sql)).result()

    def factory() -> str:
        name = f"corral_test_{uuid.uuid4().hex[:12]}"
        run(f'CREATE DATABASE "{name}"')
        created.append(name)
        return f"{base}/{name}"

    yield factory

    async def drop_all() -> None:  # a few at a time: one by one took a minute and more at the end of a run
        room = asyncio.Semaphore(4)

        async def drop(name: str) -> None:
            async with room:
                with contextlib.suppress(Exception):
                    await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

        await asyncio.gather(*(drop(name) for name in created))

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, drop_all()).result()


@pytest.fixture(scope="session")
def nats_url(state_root: Path) -> Iterator[str]:
    if os.environ.get("CORRAL_TEST_NATS_URL"):
        yield os.environ["CORRAL_TEST_NATS_URL"]
        return
    if port_open("127.0.0.1", 4222) and not FORCE_EMBEDDED:
        yield "nats://127.0.0.1:4222"
        return
    nats = embedded_nats(state_root / "nats")
    nats.start()
    yield nats.url
    nats.stop()


@pytest.fixture(scope="session")
def st_backends_path(state_root: Path) -> Path:
    """A backends directory holding the `sentencetransformers` gallery backend, installed once per session
    by the gallery installer and shared by the gRPC and e2e tests (support/st_backend.py)."""
    from support import st_backend

    root, seconds = st_backend.backends_path(state_root / "st-backends")
    if seconds is not None:
        print(f"\nsentencetransformers backend installed in {seconds:.0f} s", file=sys.stderr)
    return root


@pytest.fixture(scope="session")
def diffusers_backends_path(state_root: Path) -> Path:
    """A backends directory holding the `diffusers` gallery backend, installed once per session by the
    gallery installer (support/diffusers_backend.py)."""
    from support import diffusers_backend

    root, seconds = diffusers_backend.backends_path(state_root / "diffusers-backends")
    if seconds is not None:
        print(f"\ndiffusers backend installed in {seconds:.0f} s", file=sys.stderr)
    return root


@pytest.fixture(scope="session")
def audio_backends_path(state_root: Path) -> Path:
    """A backends directory holding the `faster-whisper` and `piper` gallery backends, installed once per session
    by the gallery installer (support/audio_backends.py)."""
    from support import audio_backends

    root, seconds = audio_backends.backends_path(state_root / "audio-backends")
    for name, took_s in seconds.items():
        print(f"\n{name} backend installed in {took_s:.0f} s", file=sys.stderr)
    return root


@pytest.fixture(scope="module")
def material() -> AuthMaterial:
    """Operator, account and service NATS material for one test module's JWT-mode (operator) nats-server."""
    from corral.cli import nats_auth_setup as auth_setup

    return auth_setup.generate()


@pytest.fixture(scope="module")
def jwt_server(
    request: pytest.FixtureRequest, state_root: Path, material: AuthMaterial
) -> Iterator[NatsServer]:
    """An operator-mode nats-server of that material, one per test module."""
    from support.nats_servers import jwt_nats_server

    server = jwt_nats_server(state_root / f"jwt-nats-{request.module.__name__.rsplit('.', 1)[-1]}", material)
    yield server
    server.stop()
