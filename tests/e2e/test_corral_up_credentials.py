"""`corral up` runs its PostgreSQL and NATS with generated credentials (0600, reused on the next
start) and PostgreSQL with fsync on; every process it starts connects with those credentials."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import asyncpg
import nats
import nats.errors
import pytest
from nats.aio.client import Client

from support.cluster import free_port, free_stable_base
from support.processes import corral_up_ready

pytestmark = pytest.mark.slow

SECRETS = ("postgres-password", "nats-password", "registration-token", "admin-key")


def _start(data_dir: Path, port: int, worker_port: int) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LOCALAI_NATS_URL", "LOCALAI_AUTH_DATABASE_URL")}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "corral",
            "up",
            "--data-dir",
            str(data_dir),
            "--port",
            str(port),
            "--worker-base-port",
            str(worker_port),
            "--no-default-models",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=env,
    )


async def _check_services(data_dir: Path, text: str) -> None:
    pg_match = re.search(r"^postgres +postgresql://postgres:\*\*\*@127\.0\.0\.1:(\d+)/corral$", text, re.M)
    assert pg_match is not None, text
    pg_port = int(pg_match[1])
    nats_match = re.search(r"^nats +nats://corral:\*\*\*@127\.0\.0\.1:(\d+)$", text, re.M)
    assert nats_match is not None, text
    nats_port = int(nats_match[1])
    with pytest.raises(asyncpg.InvalidPasswordError):  # no password on TCP: refused (not trusted)
        await asyncpg.connect(f"postgresql://postgres@127.0.0.1:{pg_port}/corral")
    with pytest.raises(asyncpg.InvalidPasswordError):
        await asyncpg.connect(f"postgresql://postgres:wrong-password@127.0.0.1:{pg_port}/corral")
    password = (data_dir / "postgres-password").read_text().strip()
    conn = await asyncpg.connect(f"postgresql://postgres:{password}@127.0.0.1:{pg_port}/corral")
    try:
        assert await conn.fetchval("SHOW fsync") == "on"
        clients = await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE datname = 'corral'")
        assert clients >= 2  # the frontend's pool, authenticated with the password
    finally:
        await conn.close()
    anonymous = Client()
    try:
        with pytest.raises(nats.errors.Error, match="[Aa]uthorization"):  # anonymous: refused
            await anonymous.connect(f"nats://127.0.0.1:{nats_port}", allow_reconnect=False, connect_timeout=5)
    finally:
        await anonymous.close()
    nats_password = (data_dir / "nats-password").read_text().strip()
    nc = await nats.connect(f"nats://corral:{nats_password}@127.0.0.1:{nats_port}", allow_reconnect=False)
    await nc.close()


async def test_corral_up_services_need_the_generated_credentials_and_keep_fsync_on() -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="corral-up-creds-", dir="/var/tmp"))
    os.chmod(data_dir, 0o755)
    port, worker_port = free_port(), free_stable_base()
    try:
        secrets_seen: dict[str, str] = {}
        for run in range(2):  # the second start reuses the credentials
            proc = _start(data_dir, port, worker_port)
            try:
                text = "".join(
                    corral_up_ready(proc, 120.0)
                )  # the worker is ready: it registered and joined NATS with the password
                for name in SECRETS:
                    path = data_dir / name
                    assert path.stat().st_mode & 0o777 == 0o600, name
                    secret = path.read_text().strip()
                    if name != "admin-key" or run:  # the admin key alone is shown, once, on the first start
                        assert secret not in text, name
                    if run:
                        assert secrets_seen[name] == secret
                    secrets_seen[name] = secret
                await _check_services(data_dir, text)
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(120)
                assert proc.stdout is not None
                proc.stdout.close()
            assert proc.returncode == 0
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
