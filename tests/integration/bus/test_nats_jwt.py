"""NATS operator/JWT mode on a real nats-server: minted worker scopes, anonymous refusal."""

from __future__ import annotations

import asyncio

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError

from corral.bus import client as bus
from corral.bus import natsauth
from corral.bus.security import NatsCredentials
from corral.cli import nats_auth_setup as auth_setup
from support.nats_servers import NatsServer, connect_refused


def test_setup_writes_secrets_readable_by_the_owner_only(jwt_server: NatsServer) -> None:
    out = jwt_server.config.parent  # where the setup material was written
    assert (out / "frontend.env").stat().st_mode & 0o777 == 0o600
    assert (out / "seeds.txt").stat().st_mode & 0o777 == 0o600
    env = dict(line.split("=", 1) for line in (out / "frontend.env").read_text().split())
    assert env["LOCALAI_NATS_ACCOUNT_SEED"].startswith("SA") and env["LOCALAI_NATS_SERVICE_SEED"].startswith(
        "SU"
    )


async def _request_when_subscribed(nc: Client, subject: str) -> Msg:
    """Ask once the subscription is in place (a reconnect in between re-subscribes; allow for it)."""
    for _ in range(20):
        try:
            return await nc.request(subject, b"{}", timeout=5)
        except NoRespondersError:
            await asyncio.sleep(0.1)
    raise AssertionError(f"nobody answers on {subject}")


async def test_a_minted_worker_uses_its_own_subjects_and_is_denied_another_nodes_install(
    jwt_server: NatsServer, material: auth_setup.AuthMaterial
) -> None:
    service = await bus.connect(
        jwt_server.url,
        "frontend",
        credentials=NatsCredentials.static(material.service_jwt, material.service_seed),
    )
    jwt, seed = natsauth.mint_worker(material.account, "node-a", ttl_s=300)
    worker = await bus.connect(jwt_server.url, "worker-a", credentials=NatsCredentials.static(jwt, seed))
    errors: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        errors.append(exc)

    worker._error_cb = on_error
    try:

        async def answer(msg: Msg) -> None:
            await msg.respond(b'{"success":true}')

        await worker.subscribe("nodes.node-a.backend.install", cb=answer)
        await worker.flush()
        reply = await _request_when_subscribed(service, "nodes.node-a.backend.install")
        assert reply.data == b'{"success":true}'
        await worker.publish("nodes.node-b.backend.install", b"{}")
        await worker.flush()
        for _ in range(50):
            if errors:
                break
            await asyncio.sleep(0.05)
        assert any(
            'permissions violation for publish to "nodes.node-b.backend.install"' in str(e) for e in errors
        )
    finally:
        await worker.close()
        await service.close()


async def test_anonymous_connections_are_refused(jwt_server: NatsServer) -> None:
    assert "Authorization Violation" in str(await connect_refused(jwt_server.url))
