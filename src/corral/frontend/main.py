"""`corral run`: connect PostgreSQL and NATS, migrate, load model configs, serve until a signal."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
from nats.aio.client import Client

from corral.agents.client import AgentBus
from corral.agents.recorder import JobRecorder
from corral.bus import client as bus
from corral.config.frontend import FrontendSettings
from corral.frontend.access import KeyCache
from corral.frontend.admin.app import unhealthy_dropper
from corral.frontend.admin.model_gallery import install_model_gallery
from corral.frontend.app import build_app
from corral.frontend.batch_runner import BatchRunner, BatchRunnerSettings
from corral.frontend.cluster_figures import ClusterFigures
from corral.frontend.http_workers import child_index
from corral.frontend.inference.agent_chat import AgentChat
from corral.frontend.inference.images import ImagePolicy
from corral.frontend.limits import RequestLimits
from corral.frontend.node_api.admission import Admission
from corral.frontend.node_api.identity import NodeCredentials
from corral.frontend.route_sync import RouteSync
from corral.frontend.startup import bootstrap_admin_key, frontend_nats_options, warn_shared_vector_store
from corral.frontend.state import FrontendState
from corral.frontend.traffic_sampler import TrafficSampler
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
from corral.replicas.load_reports import LoadReports
from corral.replicas.reconciler import ReconcilerSettings, ReplicaReconciler
from corral.revisions.cleanup import RevisionCleanup
from corral.revisions.edits import ConfigRevisions
from corral.routing.backend_client import BackendBudgets, BackendChannels
from corral.routing.breaker import Breakers, BreakerSettings
from corral.routing.eviction import Evictor
from corral.routing.local_replicas import LocalReplicas
from corral.routing.pickers.policies import RoutePolicies
from corral.routing.prefix_index import PrefixIndex
from corral.routing.queue import QueueSettings
from corral.routing.router import Router
from corral.runtime.httpguard import ConnectionLimits
from corral.runtime.httpserver import EmbeddedHTTPServer
from corral.runtime.loops import OwnedTasks, run_periodic
from corral.staging.prehash import ModelPrehasher
from corral.staging.stager import StagingContext
from corral.store import db, generated_images
from corral.store import responses as responses_store
from corral.store import settings as settings_store
from corral.store import usage as usage_store
from corral.telemetry import families, otlp
from corral.tenancy.ledger import UsageLedger
from corral.tenancy.limits import Limits
from corral.tenancy.sinks import UsageSinks
from corral.tenancy.usage import UsageSink

log = logging.getLogger(__name__)
USAGE_SWEEP_S = 3600.0  # usage rows are hourly: an hourly sweep keeps the retention to the hour

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
    usage: UsageSink,
) -> Router:
    """The request path, wired once: local replicas → evictor → load context → jobs → cold path → router."""
    frontend_id = str(uuid.uuid4())
    index = PrefixIndex(ttl_s=settings.prefix_cache_ttl_s, max_blocks=settings.prefix_index_max_blocks)
    replicas = LocalReplicas(
        nc,
        frontend_id,
        RoutePolicies(index, prefix_cache_default=settings.prefix_cache),
        Breakers(BreakerSettings.from_settings(settings)),
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
    return Router(ctx, replicas, cold, evictor, QueueSettings.from_settings(settings), usage)


@dataclass
class Frontend:
    """A started frontend: what its routes read, and every long-lived task of the process."""

    state: FrontendState
    tasks: OwnedTasks
    stop: asyncio.Event

    async def run(self) -> int:
        """Until `stop` (0), or 1 when a long-lived task ends: the process never runs half-alive."""
        died = await self.tasks.until_stop(self.stop)
        if died is not None:
            log.error("%s; exiting", died)
            return 1
        return 0


@dataclass
class Connections:
    """What every part of the frontend talks through, opened first and closed last."""

    telemetry: otlp.Telemetry | None
    pool: asyncpg.Pool
    nc: Client
    http: httpx.AsyncClient
    channels: BackendChannels
    staging: StagingContext


@asynccontextmanager
async def build_frontend(settings: FrontendSettings, stop: asyncio.Event) -> AsyncIterator[Frontend]:
    """Start the frontend's parts in order, each entered into one exit stack as it starts: leaving the
    block (`stop`, a task that died, or a start that failed half way) closes what had started, the last
    started first: tasks, HTTP server, node lifecycle, agent jobs, router, backend channels, HTTP client,
    NATS, PostgreSQL, then the last spans are flushed."""
    if not settings.registration_token:
        log.warning(
            "no registration token set: any host that reaches this frontend can register as a worker; "
            "set LOCALAI_REGISTRATION_TOKEN"
        )
    declared_rules = scheduling_seed.declared_rules(settings)  # a mistake stops the start, naming the entry
    async with AsyncExitStack() as stack:
        conn = await _connect(stack, settings)
        pool, nc = conn.pool, conn.nc
        models_dir = Path(settings.models_path).resolve()
        configs = load_model_configs(models_dir, settings.model_path_roots)
        log.info(
            "%d model(s) configured in %s: %s", len(configs), models_dir, ", ".join(sorted(configs)) or "-"
        )
        aliases = load_aliases(models_dir, set(configs))
        await apply_boot_settings(pool, settings)
        await scheduling_seed.apply(pool, declared_rules)
        usage = UsageLedger(
            pool, flush_interval_s=settings.usage_flush_interval_s, max_pending=settings.usage_max_pending
        )
        await stack.enter_async_context(usage)  # closed after the router: the last call's counts are written
        key_limits = Limits(usage, sync_interval_s=settings.key_limits_sync_interval_s)
        router = build_router(
            settings, pool, nc, conn.http, conn.channels, aliases, conn.staging, UsageSinks(usage, key_limits)
        )
        stack.push_async_callback(router.close)  # also after a start that failed half way
        await router.start()
        loads = LoadReports(nc, router.replicas.frontend_id, router.queue, settings.load_report_interval_s)
        await loads.start()  # issue 25: the cluster's queue figures per model, for autoscaling on load
        # ... and for eviction: a replica whose model has callers queued is not idle
        router.evictor.waiting = loads.waiting
        reconciler = ReplicaReconciler(
            router,
            configs,
            aliases,
            ReconcilerSettings(
                settings.reconciler_interval_s,
                settings.scale_down_idle_s,
                settings.unsatisfiable_cooldown_s,
                settings.autoscale_cooldown_s,
            ),
            loads=loads,
        )
        # issue 5: heartbeats, health monitor, minting; the reconciler hears of every node event
        keys, node_credentials = KeyCache(pool), NodeCredentials(pool)
        lifecycle = NodeLifecycle.build(
            pool,
            nc,
            settings,
            listeners=[node_credentials.forget, unhealthy_dropper(router), reconciler.on_node_event],
            key_revoked=[keys.evict],
        )
        await bootstrap_admin_key(pool, settings.bootstrap_admin_key)
        warn_shared_vector_store(settings)
        prehasher = (
            ModelPrehasher()
            if settings.prehash_models
            and not settings.distributed_shared_models
            and child_index() in (None, 0)
            else None
        )
        cleanup = RevisionCleanup(pool, nc, router)
        revs = ConfigRevisions(
            pool,
            nc,
            router,
            configs,
            models_dir,
            aliases,
            extra_roots=settings.model_path_roots,
            cleanup_kick=cleanup.kick,
            on_config=None if prehasher is None else lambda cfg: prehasher.submit([cfg]),
        )
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
        figures = ClusterFigures(pool, router.replicas.all)
        agent_jobs = JobRecorder(pool, nc)
        state = _state(
            settings, conn, router, lifecycle, revs, backend_ops, figures, agent_jobs, usage, key_limits
        )
        state.traffic = traffic = TrafficSampler(  # issue 26: the Dashboard's series, alike on every frontend
            nc, pool, router.replicas.frontend_id, settings.traffic_sample_interval_s, router.replicas.all
        )
        await traffic.start()
        state.model_gallery = install_model_gallery(state, settings, router.replicas.frontend_id)  # issue 26
        if state.model_gallery is not None:  # closed before PostgreSQL: its running installs fail, named
            stack.push_async_callback(state.model_gallery.close)
        route_sync = RouteSync(pool, nc, state.routes)  # issue 25: model routes, kept fresh on every frontend
        await route_sync.start()
        await agent_jobs.start()
        stack.push_async_callback(agent_jobs.stop)
        await lifecycle.start()
        stack.push_async_callback(lifecycle.stop)
        await _serve_http(stack, settings, state, keys, node_credentials)
        tasks = OwnedTasks()  # every long-lived task of this process: one that ends makes the process exit 1
        stack.push_async_callback(tasks.close)
        stack.callback(stop.set)  # before the tasks are closed: their loops see it
        tasks.adopt([*router.background_tasks, *lifecycle.tasks, *usage.tasks])
        tasks.start("stuck-replica-sweep", stuck_replicas.run(pool, nc, settings.load_orphan_window_s, stop))
        tasks.start("revision-cleanup", cleanup.run(stop))
        tasks.start("config-resync", revs.run(stop))
        tasks.start("replica-reconciler", reconciler.run(stop))
        tasks.start("load-reports", loads.run(stop))
        tasks.start("backend-ops", backend_ops.run(stop))
        tasks.start("key-limits-sync", key_limits.run(nc, stop))  # rate-limit counts shared between frontends
        tasks.start("routes-refresh", route_sync.run(stop))
        tasks.start("traffic-series", traffic.run(stop))
        _start_sweeps(tasks, settings, pool, stop)
        tasks.start(
            "batch-runner",
            BatchRunner.for_frontend(state, BatchRunnerSettings.from_settings(settings)).run(stop),
        )
        if prehasher is not None:
            prehasher.submit(configs.values())
            tasks.start("model-prehash", prehasher.run(stop))
        if conn.telemetry is not None and conn.telemetry.bridge is not None:
            tasks.start("otlp-metrics", conn.telemetry.bridge.run(stop, before=figures.refresh))
        stack.callback(log.info, "frontend shutting down")
        yield Frontend(state, tasks, stop)


async def _connect(stack: AsyncExitStack, settings: FrontendSettings) -> Connections:
    """Telemetry, PostgreSQL (migrated), NATS, the HTTP client, backend channels and staging."""
    telemetry = await asyncio.to_thread(
        otlp.configure, "corral-frontend", metrics=True
    )  # imports: off the loop
    if telemetry is not None:
        stack.push_async_callback(asyncio.to_thread, telemetry.shutdown)  # flush the last spans
    pool = await db.connect(settings.database_url)
    stack.push_async_callback(pool.close)
    applied = await db.migrate(pool)
    if applied:
        log.info("database migrated: %s", ", ".join(applied))
    nc = await bus.connect(settings.nats_url, "corral-frontend", **frontend_nats_options(settings))
    stack.push_async_callback(nc.drain)
    http = await asyncio.to_thread(  # off the loop: it loads the CA bundle (~0.1-0.3 s of CPU)
        httpx.AsyncClient, timeout=httpx.Timeout(30.0, read=None, write=None), http1=True
    )
    stack.push_async_callback(http.aclose)
    channels = BackendChannels(settings.registration_token, BackendBudgets.from_settings(settings))
    stack.push_async_callback(channels.close)
    staging = await asyncio.to_thread(
        StagingContext.from_settings, settings, http
    )  # S3: boto3 import + client
    return Connections(telemetry, pool, nc, http, channels, staging)


def _state(
    settings: FrontendSettings,
    conn: Connections,
    router: Router,
    lifecycle: NodeLifecycle,
    revs: ConfigRevisions,
    backend_ops: BackendOpsDriver,
    figures: ClusterFigures,
    agent_jobs: JobRecorder,
    usage: UsageLedger,
    key_limits: Limits,
) -> FrontendState:
    agent_bus = AgentBus(
        conn.nc,
        tool_timeout_s=settings.mcp_tool_timeout_s,
        discovery_timeout_s=settings.mcp_discovery_timeout_s,
    )
    return FrontendState(
        pool=conn.pool,
        nc=conn.nc,
        router=router,
        configs=revs.configs,
        config_revisions=revs,
        registration_token=settings.registration_token,
        auto_approve_nodes=settings.auto_approve_nodes,
        lifecycle=lifecycle,
        expose_node_header=settings.expose_node_header,
        aliases=revs.aliases,
        backend_ops=backend_ops,
        figures=figures,
        admission=Admission.from_settings(settings),
        agents=AgentChat(router, agent_bus, settings.mcp_max_iterations),
        agent_jobs=agent_jobs,
        mcp_max_iterations=settings.mcp_max_iterations,
        max_n=settings.max_n,
        staging=conn.staging,
        transcription_max_bytes=settings.inference_max_body_bytes,
        generated_image_ttl_s=settings.generated_image_ttl_s,
        images=ImagePolicy(
            settings.image_max_bytes,
            settings.image_max_count,
            settings.image_url_hosts,
            settings.image_fetch_timeout_s,
        ),
        responses_ttl_s=settings.responses_ttl_s,
        usage=usage,
        key_limits=key_limits,
        files_max_bytes=settings.files_max_bytes,
    )


async def _serve_http(
    stack: AsyncExitStack,
    settings: FrontendSettings,
    state: FrontendState,
    keys: KeyCache,
    node_credentials: NodeCredentials,
) -> None:
    host, port = settings.address
    app = await asyncio.to_thread(  # ~0.2 s of CPU: off the loop
        build_app,
        state,
        RequestLimits.from_settings(settings),
        keys=keys,
        node_credentials=node_credentials,
    )
    server = EmbeddedHTTPServer(
        app,
        host or "0.0.0.0",
        port,
        name="frontend-http",
        reuse_port=settings.http_workers > 1,
        limits=ConnectionLimits.from_settings(settings, families.HTTP_GUARD),
    )
    await server.start()
    stack.push_async_callback(server.stop)
    log.info("frontend listening on http://%s:%d", host or "0.0.0.0", port)
    gc.freeze()  # what startup built (app, schemas, configs) lives forever: later collections skip it
    gc.set_threshold(*GC_THRESHOLDS)


def _start_sweeps(
    tasks: OwnedTasks, settings: FrontendSettings, pool: asyncpg.Pool, stop: asyncio.Event
) -> None:
    if settings.usage_retention_s > 0:  # issue 25: usage rows past CORRAL_USAGE_RETENTION
        tasks.start(
            "usage-sweep",
            run_periodic(
                "usage sweep",
                lambda: usage_store.sweep(pool, settings.usage_retention_s),
                USAGE_SWEEP_S,
                stop,
            ),
        )
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


async def serve(settings: FrontendSettings) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with build_frontend(settings, stop) as frontend:
        return await frontend.run()
