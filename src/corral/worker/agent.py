"""The worker agent: register, serve files, obey NATS, heartbeat, shut down in order."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from pathlib import Path
from typing import Any

from corral.bus import client as bus
from corral.config.settings import Settings
from corral.httpserver import EmbeddedHTTPServer
from corral.worker import hardware
from corral.worker.addresses import WorkerAddresses, resolve_addresses
from corral.worker.handlers import NodeHandlers
from corral.worker.ports import PortAllocator
from corral.worker.registration import FrontendClient
from corral.worker.supervisor import Supervisor

log = logging.getLogger(__name__)

DEREGISTER_TIMEOUT_S = 10.0


class Worker:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.addresses: WorkerAddresses = resolve_addresses(
            addr=settings.addr, serve_addr=settings.serve_addr, grpc_max_port=settings.grpc_max_port,
            http_addr=settings.http_addr, advertise_addr=settings.advertise_addr,
            advertise_http_addr=settings.advertise_http_addr,
        )
        self.models_dir = Path(settings.models_path).resolve()
        self.node_name = settings.node_name or socket.gethostname()
        self.node_id = ""
        self.nats_up = False
        self._stop = asyncio.Event()
        self.frontend = FrontendClient(settings.register_to, settings.registration_token)
        self.supervisor = Supervisor(
            PortAllocator(self.addresses.base_port, self.addresses.max_port),
            bind_host="0.0.0.0", token=settings.registration_token,
            start_timeout_s=settings.backend_start_timeout_s,
        )

    def readiness(self) -> str | None:
        if not self.node_id:
            return "not registered with the frontend yet"
        if not self.nats_up:
            return "NATS connection is down: worker cannot receive work"
        return None

    def _registration_body(self) -> dict[str, Any]:
        facts = hardware.probe(self.models_dir)
        slots = max(1, self.settings.max_replicas_per_model)
        body: dict[str, Any] = {
            "name": self.node_name, "address": self.addresses.advertise_grpc,
            "http_address": self.addresses.advertise_http, "total_vram": facts.total_vram,
            "available_vram": facts.total_vram, "gpu_vendor": facts.gpu_vendor,
            "max_replicas_per_model": slots, "total_ram": facts.total_ram,
            "available_ram": facts.available_ram,
            "labels": {**self.settings.node_labels, "node.replica-slots": str(slots)},
        }
        if facts.total_disk:
            body.update(total_disk=facts.total_disk, available_disk=facts.available_disk)
        if self.settings.registration_token:
            body["token"] = self.settings.registration_token
        return body

    def _heartbeat_body(self) -> dict[str, Any]:
        facts = hardware.probe(self.models_dir)
        body: dict[str, Any] = {"available_ram": facts.available_ram}
        if facts.total_disk:
            body.update(total_disk=facts.total_disk, available_disk=facts.available_disk)
        return body

    async def _on_nats_state(self, up: bool) -> None:
        self.nats_up = up

    async def request_stop(self) -> None:
        self._stop.set()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stop.set)
        self.models_dir.mkdir(parents=True, exist_ok=True)
        reply = await self.frontend.register(self._registration_body())
        self.node_id = reply["id"]
        log.info("registered as %s (%s), status %s", self.node_name, self.node_id, reply.get("status"))

        from corral.staging.receiver import build_file_server

        app = build_file_server(self.models_dir, self.settings.registration_token, readiness=self.readiness,
                                allow_unauthenticated=self.settings.allow_unauthenticated)
        host, port = self.addresses.http_bind
        http = EmbeddedHTTPServer(app, host, port, name="file-server")
        await http.start()
        nc = await bus.connect(self.settings.nats_url, f"corral-worker-{self.node_name}", self._on_nats_state)
        self.nats_up = nc.is_connected
        handlers = NodeHandlers(nc, self.node_id, self.supervisor, self.addresses.advertise_host,
                                self.request_stop)
        await handlers.subscribe()
        log.info("worker %s ready: gRPC base %d-%d, files on %s:%d", self.node_name, self.addresses.base_port,
                 self.addresses.max_port, host, port)
        heartbeat = asyncio.create_task(self._heartbeat_loop(), name="heartbeat")
        try:
            await self._stop.wait()
        finally:
            log.info("worker %s shutting down", self.node_name)
            heartbeat.cancel()
            try:
                await asyncio.wait_for(self.frontend.deregister(self.node_id), DEREGISTER_TIMEOUT_S)
            except Exception as exc:  # the frontend may be gone already; shutdown continues
                log.warning("deregistration failed: %s", exc)
            await self.supervisor.stop_all()
            await nc.drain()
            await http.stop()
            await self.frontend.close()
        return 0

    async def _heartbeat_loop(self) -> None:
        interval_s = self.settings.heartbeat_interval_s if self.settings.heartbeat_interval_s > 0 else 10.0
        while True:
            await asyncio.sleep(interval_s)
            if not self.nats_up:
                continue
            try:
                status = await self.frontend.heartbeat(self.node_id, self._heartbeat_body())
                if status == 404:
                    log.warning("frontend no longer knows node %s; re-registering", self.node_id)
                    reply = await self.frontend.register(self._registration_body())
                    self.node_id = reply["id"]
            except Exception as exc:
                log.warning("heartbeat failed: %s", exc)
