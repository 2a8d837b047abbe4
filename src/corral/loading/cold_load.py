"""One cold load, step by step: place → install → stage → LoadModel → record.

Each step is a small function so the durable load-job, staging and placement issues can
replace one step without moving the others.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import grpc
import httpx
import yaml
from nats.aio.client import Client

from corral.bus import subjects
from corral.bus.messages import BackendStopRequest
from corral.loading import replay
from corral.loading.deadlines import deadline_message, load_budget_s
from corral.loading.errors import LoadDeadlineExceeded, LoadError, LoadModelFailed
from corral.loading.place import place_and_install, plan
from corral.loading.progress import INSTALLING, LOADING, PENDING, STAGING, LoadProgress
from corral.models.config import ModelConfig
from corral.placement.snapshot import NodeSnapshot
from corral.proto import backend_pb2
from corral.routing.backend_client import BackendChannels
from corral.routing.replica import Replica
from corral.staging.stager import StagingContext, StagingTarget, stage_model
from corral.store import placement as placement_store
from corral.store import replicas as replica_store
from corral.store import revisions

log = logging.getLogger(__name__)



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
    evictor: Any = None  # routing.eviction.Evictor; frees a node when nothing has room
    aliases: Mapping[str, str] = field(default_factory=dict)  # alias -> model (models/aliases.py)


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


async def check_revision(ctx: LoadContext, cfg: ModelConfig, *, quarantine: bool = False) -> None:
    """Establish the model's revision on first sight; refuse to load (or keep) an outdated one."""
    if not cfg.revision:
        return
    await revisions.establish(ctx.pool, cfg.name, cfg.revision, yaml.safe_dump(cfg.raw, sort_keys=False))
    state = await revisions.get(ctx.pool, cfg.name)
    if state is None or state["config_revision"] == cfg.revision:
        return
    if quarantine:
        await revisions.advance(ctx.pool, cfg.name, state["config_revision"], state["config_yaml"])
    raise LoadError(f"loading model {cfg.name}: its configuration changed (revision {cfg.revision[:12]} is "
                    f"stale, current {state['config_revision'][:12]}); retry the request")


async def cold_load(ctx: LoadContext, cfg: ModelConfig, progress: LoadProgress | None = None) -> Replica:
    progress = progress or LoadProgress()
    progress.phase(PENDING)
    await check_revision(ctx, cfg)
    decision = await plan(ctx, cfg)
    if decision.needs_eviction and ctx.evictor is not None:
        if await ctx.evictor.evict_for(cfg.name):
            decision = await plan(ctx, cfg)
    progress.on_node(decision.node.id, decision.node.name, decision.node.free_replica_index(cfg.name) or 0)
    progress.phase(INSTALLING)
    placed = await place_and_install(ctx, cfg, decision)
    node, replica_index, address = placed.node, placed.replica_index, placed.address
    progress.on_node(node.id, node.name, replica_index)
    log.info("loading %s on node %s (replica %d)", cfg.name, node.name, replica_index)
    row: dict[str, Any] = dict(node_id=node.id, model=cfg.name, replica_index=replica_index, address=address,
               backend=cfg.backend, config_revision=cfg.revision)
    try:
        await replica_store.upsert(ctx.pool, state=replica_store.STAGING, **row)
        progress.phase(STAGING)
        target = StagingTarget(node.name, node.http_address, node.id)
        staged = await stage_model(ctx.staging.with_bus(ctx.nc), target, cfg, model_options(cfg), progress)
        await replica_store.upsert(ctx.pool, state=replica_store.LOADING, **row)
        progress.phase(LOADING)
        await call_load_model(ctx, address, cfg, staged)
        await replica_store.upsert(ctx.pool, state=replica_store.LOADED, **row)
        await check_revision(ctx, cfg, quarantine=True)  # an edit during the load: never route the old one
    except BaseException as exc:
        await placement_store.release_vram(ctx.pool, node.id, placed.reserved_vram)
        await replica_store.delete(ctx.pool, node_id=node.id, model=cfg.name, replica_index=replica_index,
                                   address=address)
        await stop_backend(ctx, node, cfg, replica_index)
        if isinstance(exc, Exception) and not isinstance(exc, LoadError):
            raise LoadError(f"loading model {cfg.name} on node {node.name}: {exc}") from exc
        raise
    log.info("model %s loaded on node %s at %s", cfg.name, node.name, address)
    await replay.record(ctx.pool, cfg, model_options(cfg))  # the reconciler can load it again from this alone
    return Replica(model=cfg.name, node_id=node.id, node_name=node.name, address=address,
                   replica_index=replica_index)
