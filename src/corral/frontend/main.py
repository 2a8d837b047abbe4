"""`corral run`: connect PostgreSQL and NATS, migrate, load model configs, serve until a signal."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

import httpx

from corral.bus import client as bus
from corral.config.settings import Settings
from corral.control import stuck_replicas
from corral.frontend.app import build_app
from corral.frontend.state import FrontendState
from corral.httpserver import EmbeddedHTTPServer
from corral.loading.cold_load import LoadContext
from corral.models.config import load_model_configs
from corral.routing.backend_client import BackendChannels
from corral.routing.router import Router
from corral.staging.stager import StagingContext
from corral.store import db

log = logging.getLogger(__name__)


async def serve(settings: Settings) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if not settings.registration_token:
        log.warning("no registration token set: any host that reaches this frontend can register as a worker; "
                    "set LOCALAI_REGISTRATION_TOKEN")
    pool = await db.connect(settings.database_url)
    applied = await db.migrate(pool)
    if applied:
        log.info("database migrated: %s", ", ".join(applied))
    nc = await bus.connect(settings.nats_url, "corral-frontend")
    models_dir = Path(settings.models_path).resolve()
    configs = load_model_configs(models_dir)
    log.info("%d model(s) configured in %s: %s", len(configs), models_dir, ", ".join(sorted(configs)) or "-")
    http = httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=None, write=None), http1=True)
    ctx = LoadContext(pool=pool, nc=nc, http=http, channels=BackendChannels(settings.registration_token),
                      staging=StagingContext.from_settings(settings, http), token=settings.registration_token,
                      install_timeout_s=settings.backend_install_timeout_s,
                      load_timeout_override_s=settings.model_load_timeout_s)
    router = Router(ctx, wait_budget_s=settings.model_load_wait_s, stall_s=settings.load_stall_window_s,
                    orphan_s=settings.load_orphan_window_s)
    await router.start()
    state = FrontendState(pool=pool, nc=nc, router=router, configs=configs,
                          registration_token=settings.registration_token,
                          auto_approve_nodes=settings.auto_approve_nodes)
    host, port = settings.address
    server = EmbeddedHTTPServer(build_app(state), host or "0.0.0.0", port, name="frontend-http")
    await server.start()
    log.info("frontend listening on http://%s:%d", host or "0.0.0.0", port)
    sweeper = asyncio.create_task(stuck_replicas.run(pool, nc, settings.load_orphan_window_s, stop),
                                  name="stuck-replica-sweep")
    try:
        await stop.wait()
    finally:
        log.info("frontend shutting down")
        await sweeper
        await server.stop()
        await router.close()
        await http.aclose()
        await nc.drain()
        await pool.close()
    return 0
