"""`corral run`: connect PostgreSQL and NATS, migrate, load model configs, serve until a signal."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import uuid
from pathlib import Path

import asyncpg
import httpx
from nats.aio.client import Client

from corral.agents.client import AgentBus
from corral.agents.recorder import JobRecorder
from corral.bus import client as bus
from corral.config.frontend import FrontendSettings
from corral.frontend.app import build_app
from corral.frontend.cluster_figures import ClusterFigures
from corral.frontend.http_workers import child_index
from corral.frontend.inference.agent_chat import AgentChat
from corral.frontend.inference.images import ImagePolicy
from corral.frontend.limits import RequestLimits
from corral.frontend.node_api.admission import Admission
from corral.frontend.startup import bootstrap_admin_key, frontend_nats_options, warn_shared_vector_store
from corral.frontend.state import FrontendState
from corral.loading.context import LoadContext
from corral.loading.job import JobSettings, LoadJobRunner
from corral.loading.job_placement import DISK_CHECK_SETTING
from corral.loading.request_wait import ColdLoads
from corral.loading.request_waiters import Waiters
from corral.models.aliases import load_aliases
from corral.models.config import load_model_configs
from corral.nodes.backend_ops import BackendOpsDriver, BackendOpSettings
from corral.nodes.lifecycle import NodeLifecycle
from corral.replicas import scheduling_seed
from corral.replicas import stuck as stuck_replicas
from corral.replicas.reconciler import ReconcilerSettings, ReplicaReconciler
from corral.revisions.cleanup import RevisionCleanup
from corral.revisions.edits import ConfigRevisions
from corral.routing.backend_client import BackendBudgets, BackendChannels
from corral.routing.eviction import Evictor
from corral.routing.local_replicas import LocalReplicas
from corral.routing.pickers.policies import RoutePolicies
from corral.routing.prefix_index import PrefixIndex
from corral.routing.router import Router
from corral.runtime.httpguard import ConnectionLimits
from corral.runtime.httpserver import EmbeddedHTTPServer
from corral.runtime.loops import OwnedTasks, run_periodic
from corral.staging.prehash import ModelPrehasher
from corral.staging.stager import StagingContext
from corral.store import db, generated_images
from corral.store import responses as responses_store
from corral.store import settings as settings_store
from corral.telemetry import families, otlp

log = logging.getLogger(__name__)

# A request's objects die by reference counting; at the default 700 a young collection ran every few
# requests and walked the in-flight ones only to promote them (~6% of a warm request's CPU). Cycles still
# get collected, just after 20k new container objects instead of 700 (a few MB at most).
GC_THRESHOLDS = (20_000, 10, 10)


async def apply_boot_settings(pool: asyncpg.Pool, settings: FrontendSettings) -> None:
    """A flag given at boot writes the shared runtime value (last write wins, like POST /api/settings)."""
    if settings.disk_headroom_check is not None:
        await settings_store.put(pool, DISK_CHECK_SETTING, bool(settings.disk_headroom_check))
    if not await settings_store.get(pool, DISK_CHECK_SETTING, True):
        log.warning(
            "the disk-headroom check is DISABLED (distributed-disk-headroom-check=false): models are "
            "placed even on nodes that cannot store them; staging may fail with ENOSPC"
        )


def build_router(
    settings: FrontendSettings,
    pool: asyncpg.Pool,
    nc: Client,
    http: httpx.AsyncClient,
    channels: BackendChannels,
    aliases: dict[str, str],
    staging: StagingContext,
) -> Router:
    """The request path, wired once: local replicas → evictor → load context → jobs → cold path → router."""
    frontend_id = str(uuid.uuid4())
    index = PrefixIndex(ttl_s=settings.prefix_cache_ttl_s, max_blocks=settings.prefix_index_max_blocks)
    replicas = LocalReplicas(
        nc, frontend_id, RoutePolicies(index, prefix_cache_default=settings.prefix_cache)
    )
    evictor = Evictor(
        pool, nc, replicas.inflight, replicas.in_flight, wait_s=settings.eviction_wait_s, aliases=aliases
    )
    ctx = LoadContext(
        pool=pool,
        nc=nc,
        http=http,
        channels=channels,
        staging=staging,
        token=settings.registration_token,
        install_timeout_s=settings.backend_install_timeout_s,
        load_timeout_override_s=settings.model_load_timeout_s,
        evictor=evictor,
        aliases=aliases,
    )
    jobs = JobSettings(
        owner=frontend_id, stall_s=settings.load_stall_window_s, orphan_s=settings.load_orphan_window_s
    )
    waiters = Waiters(pool, nc, orphan_s=settings.load_orphan_window_s)
    runner = LoadJobRunner(ctx, jobs, waiters, replicas.loaded)
    cold = ColdLoads(runner, waiters, jobs, wait_budget_s=settings.model_load_wait_s)
    return Router(ctx, replicas, cold, evictor)


async def serve(settings: FrontendSettings) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if not settings.registration_token:
        log.warning(
            "no registration token set: any host that reaches this frontend can register as a worker; "
            "set LOCALAI_REGISTRATION_TOKEN"
        )
    declared_rules = scheduling_seed.declared_rules(settings)  # a mistake stops the start, naming the entry
    pool = await db.connect(settings.database_url)
    applied = await db.migrate(pool)
    if applied:
        log.info("database migrated: %s", ", ".join(applied))
    telemetry = await asyncio.to_thread(
        otlp.configure, "corral-frontend", metrics=True
    )  # imports: off the loop
    nc = await bus.connect(settings.nats_url, "corral-frontend", **frontend_nats_options(settings))
    models_dir = Path(settings.models_path).resolve()
    configs = load_model_configs(models_dir, settings.model_path_roots)
    log.info("%d model(s) configured in %s: %s", len(configs), models_dir, ", ".join(sorted(configs)) or "-")
    aliases = load_aliases(models_dir, set(configs))
    http = await asyncio.to_thread(  # off the loop: it loads the CA bundle (~0.1-0.3 s of CPU)
        httpx.AsyncClient, timeout=httpx.Timeout(30.0, read=None, write=None), http1=True
    )
    channels = BackendChannels(settings.registration_token, BackendBudgets.from_settings(settings))
    staging = await asyncio.to_thread(
        StagingContext.from_settings, settings, http
    )  # S3: boto3 import + client
    await apply_boot_settings(pool, settings)
    await scheduling_seed.apply(pool, declared_rules)
    router = build_router(settings, pool, nc, http, channels, aliases, staging)
    await router.start()
    lifecycle = NodeLifecycle.build(pool, nc, settings)  # issue 5: heartbeats, health monitor, minting
    await bootstrap_admin_key(pool, settings.bootstrap_admin_key)
    warn_shared_vector_store(settings)
    revs = ConfigRevisions(
        pool, nc, router, configs, models_dir, aliases, extra_roots=settings.model_path_roots
    )
    cleanup = RevisionCleanup(pool, nc, router)
    revs.cleanup_kick = cleanup.kick
    await revs.start()
    backend_ops = BackendOpsDriver(
        pool,
        nc,
        str(uuid.uuid4()),
        BackendOpSettings(
            settings.backend_install_timeout_s,
            settings.backend_upgrade_timeout_s,
            settings.backend_delete_timeout_s,
            settings.node_op_timeout_s,
        ),
    )
    state = FrontendState(
        pool=pool,
        nc=nc,
        router=router,
        configs=configs,
        config_revisions=revs,
        registration_token=settings.registration_token,
        auto_approve_nodes=settings.auto_approve_nodes,
        lifecycle=lifecycle,
        expose_node_header=settings.expose_node_header,
        aliases=aliases,
        backend_ops=backend_ops,
        figures=ClusterFigures(pool, router.replicas.all),
        admission=Admission.from_settings(settings),
    )
    state.agents = AgentChat(
        state,
        AgentBus(
            nc,
            tool_timeout_s=settings.mcp_tool_timeout_s,
            discovery_timeout_s=settings.mcp_discovery_timeout_s,
        ),
        settings.mcp_max_iterations,
    )
    state.mcp_max_iterations = settings.mcp_max_iterations
    state.max_n = settings.max_n
    state.staging, state.transcription_max_bytes = staging, settings.inference_max_body_bytes
    state.generated_image_ttl_s = settings.generated_image_ttl_s
    state.images = ImagePolicy(
        settings.image_max_bytes,
        settings.image_max_count,
        settings.image_url_hosts,
        settings.image_fetch_timeout_s,
    )
    state.responses_ttl_s = settings.responses_ttl_s
    state.agent_jobs = JobRecorder(pool, nc)
    await state.agent_jobs.start()
    await lifecycle.start()
    host, port = settings.address
    app = await asyncio.to_thread(
        build_app, state, RequestLimits.from_settings(settings)
    )  # ~0.2 s of CPU: off the loop
    server = EmbeddedHTTPServer(
        app,
        host or "0.0.0.0",
        port,
        name="frontend-http",
        reuse_port=settings.http_workers > 1,
        limits=ConnectionLimits.from_settings(settings, families.HTTP_GUARD),
    )
    await server.start()
    log.info("frontend listening on http://%s:%d", host or "0.0.0.0", port)
    gc.freeze()  # what startup built (app, schemas, configs) lives forever: later collections skip it
    gc.set_threshold(*GC_THRESHOLDS)
    reconciler = ReplicaReconciler(
        router,
        configs,
        aliases,
        ReconcilerSettings(
            settings.reconciler_interval_s, settings.scale_down_idle_s, settings.unsatisfiable_cooldown_s
        ),
    )
    lifecycle.events.listeners.append(reconciler.on_node_event)
    tasks = (
        OwnedTasks()
    )  # every long-lived task of this process: one that ends makes the process exit non-zero
    tasks.adopt([*router.background_tasks, *lifecycle.tasks])
    tasks.start("stuck-replica-sweep", stuck_replicas.run(pool, nc, settings.load_orphan_window_s, stop))
    tasks.start("revision-cleanup", cleanup.run(stop))
    tasks.start("config-resync", revs.run(stop))
    tasks.start("replica-reconciler", reconciler.run(stop))
    tasks.start("backend-ops", backend_ops.run(stop))
    tasks.start(
        "responses-sweep",
        run_periodic(
            "responses sweep",
            lambda: responses_store.sweep(pool),
            responses_store.sweep_interval_s(settings.responses_ttl_s),
            stop,
        ),
    )
    tasks.start(
        "generated-images-sweep",
        run_periodic(
            "generated images sweep",
            lambda: generated_images.sweep(pool),
            responses_store.sweep_interval_s(settings.generated_image_ttl_s),
            stop,
        ),
    )
    if settings.prehash_models and not settings.distributed_shared_models and child_index() in (None, 0):
        prehasher = ModelPrehasher()
        prehasher.submit(configs.values())
        revs.on_config = lambda cfg: prehasher.submit([cfg])
        tasks.start("model-prehash", prehasher.run(stop))
    if telemetry is not None and telemetry.bridge is not None:
        telemetry.bridge.before = state.figures.refresh
        tasks.start("otlp-metrics", telemetry.bridge.run(stop))
    code = 0
    try:
        died = await tasks.until_stop(stop)
        if died is not None:
            log.error("%s; exiting", died)
            code = 1
    finally:
        log.info("frontend shutting down")
        stop.set()
        await tasks.close()
        await server.stop()
        await lifecycle.stop()
        await state.agent_jobs.stop()
        await router.close()
        await channels.close()
        await http.aclose()
        await nc.drain()
        await pool.close()
        if telemetry is not None:
            await asyncio.to_thread(telemetry.shutdown)  # flush the last spans
    return code
