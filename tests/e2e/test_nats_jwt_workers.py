"""Workers on a NATS server in operator/JWT mode: wait for approval, get minted credentials,
refresh them before expiry (TTL shortened), give up visibly when never approved, and lose
the bus once deleted."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from corral.bus import client as bus
from corral.bus.security import NatsCredentials
from corral.cli import nats_auth_setup as auth_setup
from support.cluster import Cluster, free_port_pair, spawn, wait_http
from support.nats_servers import NatsServer, jwt_frontend_env

pytestmark = pytest.mark.slow

JWT_TTL_S = 6.0


@pytest.fixture(scope="module")
def cluster(
    state_root: Path,
    make_database: Callable[[], str],
    jwt_server: NatsServer,
    material: auth_setup.AuthMaterial,
) -> Iterator[Cluster]:
    c = Cluster(
        root=state_root / "e2e-nats-jwt",
        database_url=make_database(),
        nats_url=jwt_server.url,
        auto_approve=False,
        frontend_env=jwt_frontend_env(material, LOCALAI_NATS_WORKER_JWT_TTL=f"{JWT_TTL_S:g}s"),
    )
    c.models_dir.mkdir(parents=True, exist_ok=True)
    try:
        c.start_frontend()
        yield c
    finally:
        c.stop()


def _node_id(cluster: Cluster, name: str) -> str | None:
    nodes = httpx.get(f"{cluster.frontend_url}/api/nodes", headers=cluster.admin_headers).json()
    return next((n["id"] for n in nodes if n["name"] == name), None)


def _ready(base: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{base - 1}/readyz").status_code == 200
    except httpx.HTTPError:
        return False


_CONNECT_ONCE = """
import asyncio, sys
import nats
from corral.bus.security import NatsCredentials

async def main() -> str:
    creds = NatsCredentials.static(sys.argv[2], sys.argv[3])
    try:
        nc = await nats.connect(sys.argv[1], allow_reconnect=False, connect_timeout=3, **creds.connect_options())
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    await nc.close()
    return "connected"

print(asyncio.run(main()))
"""


def _nats_connect(url: str, jwt: str, seed: str) -> str:
    """One connection attempt in a child process (nats-py leaves a refused socket to the garbage collector)."""
    done = subprocess.run(
        [sys.executable, "-c", _CONNECT_ONCE, url, jwt, seed],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout.strip()


def test_a_pending_worker_waits_for_approval_then_stays_connected_past_its_jwt_ttl(
    cluster: Cluster, jwt_server: NatsServer, material: auth_setup.AuthMaterial
) -> None:
    base = free_port_pair()
    worker = spawn(
        "w-jwt", [*cluster.worker_argv("w-jwt", base), "--nats-require-auth"], cluster.root / "logs"
    )
    cluster.workers.append(worker)
    deadline = time.monotonic() + 20
    while (node_id := _node_id(cluster, "w-jwt")) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert node_id is not None
    time.sleep(0.5)
    assert not _ready(base)  # a pending worker does not start without NATS credentials
    approved = httpx.post(
        f"{cluster.frontend_url}/api/nodes/{node_id}/approve", headers=cluster.admin_headers
    )
    assert approved.status_code == 200 and approved.json()["nats_jwt"] and approved.json()["nats_user_seed"]
    wait_http(f"http://127.0.0.1:{base - 1}/readyz", worker, timeout_s=30)
    time.sleep(2.5 * JWT_TTL_S)  # two and a half lifetimes of the first JWT
    assert _ready(base)

    async def ask_worker() -> bytes:
        nc = await bus.connect(
            jwt_server.url,
            "test-service",
            credentials=NatsCredentials.static(material.service_jwt, material.service_seed),
        )
        try:
            return (await nc.request(f"nodes.{node_id}.models.running", b"{}", timeout=5)).data
        finally:
            await nc.close()

    assert b"models" in asyncio.run(ask_worker())

    async def follow_backend_lines() -> bytes:
        """A minted credential may publish its own backends' live log lines (issue 11)."""
        nc = await bus.connect(
            jwt_server.url,
            "test-service",
            credentials=NatsCredentials.static(material.service_jwt, material.service_seed),
        )
        try:
            sub = await nc.subscribe(f"nodes.{node_id}.backend.logs.simulator.lines")
            reply = await nc.request(
                f"nodes.{node_id}.backend.install", b'{"backend": "simulator"}', timeout=60
            )
            assert b'"success":true' in reply.data, reply.data
            return (await sub.next_msg(timeout=10)).data
        finally:
            await nc.close()

    assert b"starting backend" in asyncio.run(follow_backend_lines())
    assert "Permissions Violation" not in worker.log()
    assert worker.log().count("NATS credentials refreshed") >= 2
    assert worker.popen.poll() is None


def test_a_worker_that_is_never_approved_exits_non_zero_after_bounded_attempts(cluster: Cluster) -> None:
    base = free_port_pair()
    worker = spawn(
        "w-never",
        [*cluster.worker_argv("w-never", base), "--nats-require-auth", "--register-max-attempts", "2"],
        cluster.root / "logs",
    )
    assert worker.popen.wait(60) == 1
    assert "no NATS credentials after 2 registrations" in worker.log()
    assert "Traceback" not in worker.log()


def test_a_deleted_nodes_nats_credentials_stop_working_and_its_name_cannot_be_taken_for_new_ones(
    cluster: Cluster, jwt_server: NatsServer
) -> None:
    base = free_port_pair()
    worker = spawn(
        "w-del", [*cluster.worker_argv("w-del", base), "--nats-require-auth"], cluster.root / "logs"
    )
    cluster.workers.append(worker)
    deadline = time.monotonic() + 20
    while (node_id := _node_id(cluster, "w-del")) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert node_id is not None
    approved = httpx.post(
        f"{cluster.frontend_url}/api/nodes/{node_id}/approve", headers=cluster.admin_headers
    ).json()
    wait_http(f"http://127.0.0.1:{base - 1}/readyz", worker, timeout_s=30)
    assert approved["nats_jwt"]

    hijack = httpx.post(
        f"{cluster.frontend_url}/api/node/register",
        headers={"Authorization": f"Bearer {cluster.token}"},
        json={"name": "w-del", "address": "127.0.0.1:1", "token": cluster.token},
    )
    assert hijack.status_code == 409 and "nats_jwt" not in hijack.text  # the shared token mints nothing
    own = cluster.node_headers("w-del")
    refresh_url = f"{cluster.frontend_url}/api/node/{node_id}/nats-credentials"

    fresh = httpx.post(refresh_url, headers=own)
    assert fresh.status_code == 200  # the live node itself may refresh ...
    minted = (fresh.json()["nats_jwt"], fresh.json()["nats_user_seed"])
    assert _nats_connect(jwt_server.url, *minted) == "connected"
    deleted = httpx.delete(f"{cluster.frontend_url}/api/nodes/{node_id}", headers=cluster.admin_headers)
    assert deleted.status_code == 200
    assert httpx.post(refresh_url, headers=own).status_code == 404  # ... a deleted one gets nothing
    time.sleep(JWT_TTL_S + 1)  # the last credentials it got run out
    refused = _nats_connect(jwt_server.url, *minted).lower()
    assert "authorization violation" in refused or "expired" in refused, refused
    assert (
        worker.popen.wait(60) == 1
    )  # it registered again as a new, pending node: no credentials, so it exits
    assert "cannot refresh NATS credentials" in worker.log()
    cluster.workers.remove(worker)
