"""One cold load, step by step: place → install → stage → LoadModel → record.

Each step is a small function so the durable load-job, staging and placement issues can
replace one step without moving the others.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import asyncpg
import grpc
import httpx
from nats.aio.client import Client

from corral.bus import client as bus
from corral.bus import subjects
from corral.bus.messages import BackendInstallReply, BackendInstallRequest, BackendStopRequest
from corral.loading.deadlines import deadline_message, load_budget_s
from corral.loading.errors import InstallFailed, LoadDeadlineExceeded, LoadError, LoadModelFailed
from corral.loading.progress import INSTALLING, LOADING, PENDING, STAGING, LoadProgress
from corral.models.config import ModelConfig
from corral.placement.snapshot import NodeSnapshot
from corral.placement.thin import pick_node
from corral.proto import backend_pb2
from corral.routing.backend_client import BackendChannels
from corral.routing.replica import Replica
from corral.staging.stager import StagingContext, StagingTarget, stage_model
from corral.store import nodes as node_store
from corral.store import replicas as replica_store

log = logging.getLogger(__name__)

ProgressFn = Callable[[str, int, int], None]  # (phase, done, total)


@dataclass(frozen=True)
class LoadContext:
    pool: asyncpg.Pool
    nc: Client
    http: httpx.AsyncClient
    channels: BackendChannels
    staging: StagingContext
    token: str
    install_timeout_s: float
    load_timeout_override_s: float | None


async def choose_node(ctx: LoadContext, model: str) -> NodeSnapshot:
    rows = await node_store.schedulable(ctx.pool)
    snapshot = [
        NodeSnapshot(id=r["id"], name=r["name"], address=r["address"], http_address=r["http_address"],
                     loaded_models=int(r["loaded_models"]), in_flight=int(r["in_flight"]),
                     available_vram=int(r["available_vram"]), model_names=frozenset(r["model_names"]))
        for r in rows
    ]
    return pick_node(snapshot, model)


async def install(ctx: LoadContext, node: NodeSnapshot, cfg: ModelConfig, replica_index: int) -> str:
    request = BackendInstallRequest(backend=cfg.backend, model_id=cfg.name, replica_index=replica_index)
    try:
        reply = await bus.request(ctx.nc, subjects.backend_install(node.id), request, BackendInstallReply,
                                  ctx.install_timeout_s, "LOCALAI_NATS_BACKEND_INSTALL_TIMEOUT")
    except bus.BusError as exc:
        raise InstallFailed(f"loading model {cfg.name}: node {node.name}: {exc}") from None
    if not reply.success:
        raise InstallFailed(f"loading model {cfg.name}: worker {node.name} replied with error: {reply.error}")
    return reply.address or node.address


def model_options(cfg: ModelConfig) -> backend_pb2.ModelOptions:
    """LoadModel options with frontend-local paths; staging rewrites them for the worker."""
    opts = backend_pb2.ModelOptions(
        Model=cfg.model, ContextSize=cfg.context_size, Embeddings=cfg.embeddings, Threads=cfg.threads,
        Seed=cfg.seed, NGPULayers=cfg.gpu_layers, Options=list(cfg.options), ModelPath=str(cfg.models_dir),
    )
    if cfg.model_file is not None:
        opts.ModelFile = str(cfg.model_file)
    return opts


async def call_load_model(ctx: LoadContext, address: str, cfg: ModelConfig,
                          opts: backend_pb2.ModelOptions) -> None:
    size_bytes = cfg.checkpoint_bytes()
    budget_s = load_budget_s(size_bytes, ctx.load_timeout_override_s)
    stub = ctx.channels.stub(address)
    try:
        result = await stub.LoadModel(opts, timeout=budget_s, metadata=ctx.channels.metadata)
    except grpc.aio.AioRpcError as exc:
        if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            raise LoadDeadlineExceeded(
                deadline_message(cfg.name, budget_s, size_bytes, ctx.load_timeout_override_s is not None)
            ) from None
        raise LoadModelFailed(f"loading model {cfg.name}: backend at {address}: {exc.details()}") from None
    if not result.success:
        raise LoadModelFailed(f"loading model {cfg.name}: {result.message}")


async def stop_backend(ctx: LoadContext, node: NodeSnapshot, cfg: ModelConfig, replica_index: int) -> None:
    """Reap an abandoned backend process (fire-and-forget, like the reference's backend.stop)."""
    payload = BackendStopRequest(backend=f"{cfg.name}#{replica_index}", force=True)
    await ctx.nc.publish(subjects.backend_stop(node.id), payload.to_json())


async def cold_load(ctx: LoadContext, cfg: ModelConfig, progress: LoadProgress | None = None) -> Replica:
    progress = progress or LoadProgress()
    progress.phase(PENDING)
    node = await choose_node(ctx, cfg.name)
    replica_index = 0
    progress.on_node(node.id, node.name, replica_index)
    log.info("loading %s on node %s", cfg.name, node.name)
    progress.phase(INSTALLING)
    address = await install(ctx, node, cfg, replica_index)
    row = dict(node_id=node.id, model=cfg.name, replica_index=replica_index, address=address,
               backend=cfg.backend)
    try:
        await replica_store.upsert(ctx.pool, state=replica_store.STAGING, **row)
        progress.phase(STAGING)
        staged = await stage_model(ctx.staging, StagingTarget(node.name, node.http_address),
                                   cfg, model_options(cfg), progress)
        await replica_store.upsert(ctx.pool, state=replica_store.LOADING, **row)
        progress.phase(LOADING)
        await call_load_model(ctx, address, cfg, staged)
        await replica_store.upsert(ctx.pool, state=replica_store.LOADED, **row)
    except BaseException as exc:
        await replica_store.delete(ctx.pool, node_id=node.id, model=cfg.name, replica_index=replica_index,
                                   address=address)
        await stop_backend(ctx, node, cfg, replica_index)
        if isinstance(exc, Exception) and not isinstance(exc, LoadError):
            raise LoadError(f"loading model {cfg.name} on node {node.name}: {exc}") from exc
        raise
    log.info("model %s loaded on node %s at %s", cfg.name, node.name, address)
    return Replica(model=cfg.name, node_id=node.id, node_name=node.name, address=address,
                   replica_index=replica_index)
