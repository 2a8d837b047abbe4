"""A follower's presence in the node registry: register as an agent-type node, heartbeat, deregister.

A follower runs no corral backend, so it registers without a gRPC address (agent nodes need none) and
placement never picks it (only `node_type = 'backend'` nodes are placed on). Its node credential is kept in
the state directory like a worker's, so a restarted follower registers as the same node.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from corral.node import hardware
from corral.node.heartbeat import Heartbeat
from corral.node.node_credential import NodeCredentialFile
from corral.node.registration import FrontendClient

log = logging.getLogger(__name__)


class NodePresence:
    """`async with NodePresence(...)`: registered (and heartbeating) inside, deregistered on the way out."""

    def __init__(
        self, register_to: str, token: str, body: dict[str, Any], state_dir: Path, heartbeat_interval_s: float
    ) -> None:
        self.frontend = FrontendClient(register_to, token)
        self.body = {**body, **({"token": token} if token else {})}
        self.credential_file = NodeCredentialFile(state_dir, str(body["name"]))
        self.node_id = ""
        self.heartbeat = Heartbeat(self.frontend, lambda: self.node_id, self._body, heartbeat_interval_s)
        self._stop = asyncio.Event()
        self._beats: asyncio.Task[None] | None = None

    async def __aenter__(self) -> NodePresence:
        self.frontend.use_node_token(await asyncio.to_thread(self.credential_file.load))
        reply = await self.frontend.register(self.body)
        self.node_id = str(reply["id"])
        token = str(reply.get("node_token") or "")
        if token:
            self.frontend.use_node_token(token)
            await asyncio.to_thread(self.credential_file.save, self.node_id, token)
        log.info("registered as %s (%s), status %s", self.body["name"], self.node_id, reply.get("status"))
        self._beats = asyncio.create_task(self.heartbeat.run(self._stop), name="follower-heartbeat")
        return self

    async def _body(self) -> dict[str, Any]:
        facts = await asyncio.to_thread(hardware.probe, Path.cwd())
        body: dict[str, Any] = {"available_ram": facts.available_ram}
        if facts.total_vram:
            body["available_vram"] = facts.available_vram
        return body

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        if self._beats is not None:
            await self._beats
        try:
            await self.frontend.deregister(self.node_id)
            log.info("deregistered %s (%s)", self.body["name"], self.node_id)
        except Exception as exc:  # the frontend may be gone; the follower still exits with vLLM's code
            log.warning("could not deregister node %s: %s", self.node_id, exc)
        await self.frontend.close()
