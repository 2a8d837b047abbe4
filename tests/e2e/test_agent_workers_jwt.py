"""Agent workers on a NATS server in operator/JWT mode: an approved agent node gets the agent worker's
permissions (reference §3.4), serves MCP discovery with them, and cannot touch backend-worker subjects."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from corral.bus.natsauth import decode_claims
from corral.bus.security import NatsCredentials
from corral.cli import nats_auth_setup as auth_setup
from support.agent_workers import mcp_model_yaml, start_agent_worker, wait_ready
from support.cluster import Cluster
from support.nats_servers import NatsServer, jwt_frontend_env

pytestmark = pytest.mark.slow

MODEL = "sim-mcp-jwt"


@pytest.fixture(scope="module")
def cluster(
    state_root: Path,
    make_database: Callable[[], str],
    jwt_server: NatsServer,
    material: auth_setup.AuthMaterial,
) -> Iterator[Cluster]:
    c = Cluster(
        root=state_root / "e2e-agent-jwt",
        database_url=make_database(),
        nats_url=jwt_server.url,
        auto_approve=False,
        frontend_env=jwt_frontend_env(material),
    )
    c.models_dir.mkdir(parents=True, exist_ok=True)
    (c.models_dir / f"{MODEL}.yaml").write_text(mcp_model_yaml(MODEL))
    try:
        c.start_frontend()
        yield c
    finally:
        c.stop()


async def _violations(url: str, jwt: str, seed: str, node_id: str) -> tuple[list[str], bytes]:
    """Publish where an agent may not and where it may; the server's refusals arrive on the error callback."""
    errors: list[str] = []
    import nats

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    nc = await nats.connect(
        url, error_cb=on_error, allow_reconnect=False, **NatsCredentials.static(jwt, seed).connect_options()
    )
    try:
        await nc.publish(f"nodes.{node_id}.backend.install", b"{}")
        await nc.publish("nodes.someone-else.backend.install", b"{}")
        await nc.flush()
        await asyncio.sleep(0.5)
        echoed = await nc.subscribe("jobs.probe.progress")
        await nc.flush()
        await nc.publish("jobs.probe.progress", b"allowed")
        message = await echoed.next_msg(timeout=5)
        return errors, message.data
    finally:
        await nc.close()


def test_an_approved_agent_worker_gets_agent_permissions_and_serves_discovery(
    cluster: Cluster, jwt_server: NatsServer, material: auth_setup.AuthMaterial
) -> None:
    worker = start_agent_worker(cluster, "agent-jwt", "--nats-require-auth", wait=False)
    deadline = time.monotonic() + 20
    node_id = None
    while node_id is None and time.monotonic() < deadline:
        nodes = httpx.get(f"{cluster.frontend_url}/api/nodes", headers=cluster.admin_headers).json()
        node_id = next((n["id"] for n in nodes if n["name"] == "agent-jwt"), None)
        time.sleep(0.1)
    assert node_id is not None
    assert "ready: queue" not in worker.log()  # pending: no credentials, no bus
    approved = httpx.post(
        f"{cluster.frontend_url}/api/nodes/{node_id}/approve", headers=cluster.admin_headers
    )
    assert approved.status_code == 200
    body = approved.json()
    assert body["node_type"] == "agent" and body["api_token"].startswith("corral-")
    claims = decode_claims(body["nats_jwt"])
    assert claims["name"].startswith("localai-agent-")
    assert "mcp.tools.execute" in claims["nats"]["sub"]["allow"]
    assert not any("backend.install" in s for s in claims["nats"]["pub"]["allow"])
    wait_ready(worker)

    discovered = httpx.get(f"{cluster.frontend_url}/v1/mcp/servers/{MODEL}", timeout=60)
    assert discovered.status_code == 200, discovered.text
    assert "add" in discovered.json()["servers"][0]["tools"]

    errors, echoed = asyncio.run(
        _violations(jwt_server.url, body["nats_jwt"], body["nats_user_seed"], node_id)
    )
    assert echoed == b"allowed"
    refused = [e for e in errors if "permissions violation" in e.lower() and "backend.install" in e]
    assert len(refused) == 2, errors
