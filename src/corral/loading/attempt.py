"""One load attempt on one node: install ∥ stage → LoadModel → record, with exact cleanup on failure.

The backend process starts while the files stage (its start does not need them), so a cold load
costs max(install, staging) + LoadModel. Any failure undoes exactly what this attempt did: the
VRAM reservation, the replica row, the backend process. A node that stops answering (bus, file
server, backend) raises NodeLost, so the caller can move to the next eligible node.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

import grpc
import httpx
from opentelemetry.trace import SpanKind

from corral.bus import client as bus
from corral.bus import subjects
from corral.bus.messages import BackendStopRequest, ModelStopReply, ModelStopRequest
from corral.loading.attempt_deadline import deadline_message, load_budget_s
from corral.loading.attempt_options import options_hash, with_node_defaults
from corral.loading.context import LoadContext, LoadedReplica
from corral.loading.errors import LoadDeadlineExceeded, LoadError, LoadModelFailed, NodeLost
from corral.loading.job_placement import Installed, install
from corral.loading.job_progress import INSTALLING, LOADING, STAGING, LoadProgress
from corral.loading.job_revision import check_revision
from corral.models.config import ModelConfig
from corral.placement.snapshot import NodeSnapshot
from corral.proto import backend_pb2
from corral.staging.errors import StagingFailed
from corral.staging.stager import StagingTarget, stage_model
from corral.store import placement as placement_store
from corral.store import replicas as replica_store
from corral.telemetry import tracing

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 10.0
_stopping: set[asyncio.Task[None]] = set()  # exact stops in flight (a reference keeps each task alive)


def model_options(cfg: ModelConfig) -> backend_pb2.ModelOptions:
    """LoadModel options with frontend-local paths; staging rewrites them for the worker."""
    opts = backend_pb2.ModelOptions(
        Model=cfg.model,
        ContextSize=cfg.context_size,
        Embeddings=cfg.embeddings,
        Reranking=cfg.reranking,
        Threads=cfg.threads,
        Seed=cfg.seed,
        NGPULayers=cfg.gpu_layers,
        Options=list(cfg.options),
        ModelPath=str(cfg.models_dir),
    )
    if cfg.model_file is not None:
        opts.ModelFile = str(cfg.model_file)
    return opts


async def call_load_model(
    ctx: LoadContext, node: NodeSnapshot, address: str, cfg: ModelConfig, opts: backend_pb2.ModelOptions
) -> None:
    size_bytes = cfg.checkpoint_bytes()
    budget_s = load_budget_s(size_bytes, ctx.load_timeout_override_s)
    stub = ctx.channels.stub(address)
    try:
        with tracing.span("backend LoadModel", {"corral.node": node.name}, kind=SpanKind.CLIENT):
            result = await stub.LoadModel(
                opts, timeout=budget_s, metadata=tracing.grpc_metadata(ctx.channels.metadata)
            )
    except grpc.aio.AioRpcError as exc:
        if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            raise LoadDeadlineExceeded(
                deadline_message(cfg.name, budget_s, size_bytes, ctx.load_timeout_override_s is not None)
            ) from None
        if exc.code() == grpc.StatusCode.UNAVAILABLE:
            raise NodeLost(
                node.name, f"backend at {address} unavailable during LoadModel: {exc.details()}"
            ) from None
        raise LoadModelFailed(f"loading model {cfg.name}: backend at {address}: {exc.details()}") from None
    if not result.success:
        raise LoadModelFailed(f"loading model {cfg.name}: {result.message}")


async def stop_backend(
    ctx: LoadContext, node_id: str, node_name: str, model: str, replica_index: int, address: str = ""
) -> None:
    """Reap an abandoned backend process without waiting on the node (it may be the one that is lost).

    Once the install answered, exactly the process at `address` is stopped, so a later attempt that
    reuses the replica index is never hit; before that, the fire-and-forget `backend.stop` by key.
    """
    if not address:
        payload = BackendStopRequest(backend=f"{model}#{replica_index}", force=True)
        await ctx.nc.publish(subjects.backend_stop(node_id), payload.to_json())
        return
    request = ModelStopRequest(
        model_name=model, process_key=f"{model}#{replica_index}", expected_address=address, force=True
    )
    task = asyncio.create_task(
        _stop_exact(ctx, node_id, node_name, request), name=f"stop:{request.process_key}"
    )
    _stopping.add(task)
    task.add_done_callback(_stopping.discard)


async def reclaim_leftovers(ctx: LoadContext, model: str) -> None:
    """A dead owner's half-done load of `model` (its rows staging or loading): forget the rows, stop the processes.

    The model's load job is the only load of it anywhere, so such rows can only be leftovers; left
    alone they would hold the replica slot they were loading into. Each stop is awaited (bounded), so
    a new install of the same process key never races it.
    """
    for row in await replica_store.reclaim_model_loads(ctx.pool, model):
        index, address = int(row["replica_index"]), str(row["address"])
        log.info(
            "reclaiming a half-done load of %s (replica %d at %r) left by a dead owner", model, index, address
        )
        request = ModelStopRequest(
            model_name=model, process_key=f"{model}#{index}", expected_address=address, force=True
        )
        await _stop_exact(
            ctx, row["node_id"], row["node_id"], request
        )  # gone before this load installs again


async def _stop_exact(ctx: LoadContext, node_id: str, node_name: str, request: ModelStopRequest) -> None:
    try:
        await bus.request(
            ctx.nc,
            subjects.model_stop(node_id),
            request,
            ModelStopReply,
            STOP_TIMEOUT_S,
            "the worker's NATS link",
        )
    except bus.BusError as exc:
        log.info(
            "abandoned backend %s at %s on node %s not stopped (%s); the worker reaps it when it is back",
            request.process_key,
            request.expected_address,
            node_name,
            exc,
        )


def node_lost_cause(node: NodeSnapshot, exc: BaseException) -> NodeLost | None:
    """The NodeLost a failure means, or None when it is the model's own (reported as it is)."""
    if isinstance(exc, NodeLost):
        return exc
    if isinstance(exc, StagingFailed) and exc.status is None:
        return NodeLost(node.name, f"file server unreachable: {exc}")
    if isinstance(exc, httpx.TransportError):
        return NodeLost(node.name, f"file server unreachable: {exc!r}")
    return None


async def _staged(
    ctx: LoadContext, target: StagingTarget, cfg: ModelConfig, progress: LoadProgress
) -> backend_pb2.ModelOptions:
    with tracing.span("corral.staging", {"corral.node": target.node_name}):
        return await stage_model(ctx.staging.with_bus(ctx.nc), target, cfg, model_options(cfg), progress)


async def _install_and_stage(
    ctx: LoadContext,
    cfg: ModelConfig,
    node: NodeSnapshot,
    replica_index: int,
    progress: LoadProgress,
    started: list[str],
) -> tuple[Installed, backend_pb2.ModelOptions]:
    """Start the backend and stage the files at once; the first failure cancels the other.

    `started` receives the backend's address as soon as the install answers (for an exact stop).
    """
    installing = asyncio.create_task(
        install(ctx, node, cfg, replica_index, progress), name=f"install:{cfg.name}"
    )
    installing.add_done_callback(
        lambda t: started.append(t.result().address) if not t.cancelled() and t.exception() is None else None
    )
    target = StagingTarget(node.name, node.http_address, node.id)
    progress.phase(STAGING)
    staging = asyncio.create_task(_staged(ctx, target, cfg, progress), name=f"stage:{cfg.name}")
    try:
        pending: set[asyncio.Task[Any]] = {installing, staging}
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # raises the first failure (the other is cancelled below)
            if staging.done() and not installing.done():
                progress.phase(INSTALLING)  # the files are there; the backend is still installing or starting
        return installing.result(), staging.result()
    finally:
        for task in (installing, staging):
            task.cancel()
        await asyncio.gather(installing, staging, return_exceptions=True)


async def _both(first: Awaitable[object], second: Awaitable[object]) -> None:
    """Run both at once and wait for both to end (neither is left running); raise the first failure."""
    results = await asyncio.gather(first, second, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


async def load_on_node(
    ctx: LoadContext, cfg: ModelConfig, node: NodeSnapshot, vram_bytes: int, progress: LoadProgress
) -> LoadedReplica:
    replica_index = node.free_replica_index(cfg.name) or 0
    progress.on_node(node.id, node.name, replica_index)
    progress.phase(INSTALLING)
    log.info("loading %s on node %s (replica %d)", cfg.name, node.name, replica_index)
    reserved = vram_bytes if await placement_store.reserve_vram(ctx.pool, node.id, vram_bytes) else 0
    row: dict[str, Any] = dict(
        node_id=node.id,
        model=cfg.name,
        replica_index=replica_index,
        address="",
        backend=cfg.backend,
        config_revision=cfg.revision,
        vram_bytes=vram_bytes,
    )
    started: list[str] = []
    try:
        await replica_store.upsert(ctx.pool, state=replica_store.STAGING, **row)  # holds the slot meanwhile
        installed, staged = await _install_and_stage(ctx, cfg, node, replica_index, progress, started)
        final = with_node_defaults(staged, installed.load_defaults)  # what the backend is loaded with
        row.update(address=installed.address, effective_options_hash=options_hash(final))
        progress.phase(LOADING)
        # the row's move to LOADING (its address, for an exact stop) is written while the backend loads, not
        # before: both are awaited to their end before anything else touches the row
        await _both(
            replica_store.upsert(ctx.pool, state=replica_store.LOADING, **row),
            call_load_model(ctx, node, installed.address, cfg, final),
        )
        await replica_store.upsert(ctx.pool, state=replica_store.LOADED, **row)
        await check_revision(ctx, cfg, quarantine=True)  # an edit during the load: never route the old one
    except BaseException as exc:
        await placement_store.release_vram(ctx.pool, node.id, reserved)
        await replica_store.delete(
            ctx.pool, node_id=node.id, model=cfg.name, replica_index=replica_index, address=row["address"]
        )
        await stop_backend(ctx, node.id, node.name, cfg.name, replica_index, started[0] if started else "")
        lost = node_lost_cause(node, exc) if isinstance(exc, Exception) else None
        if lost is not None and lost is not exc:
            raise lost from exc
        if isinstance(exc, Exception) and not isinstance(exc, LoadError):
            raise LoadError(f"loading model {cfg.name} on node {node.name}: {exc}") from exc
        raise
    log.info("model %s loaded on node %s at %s", cfg.name, node.name, row["address"])
    return LoadedReplica(
        model=cfg.name,
        node_id=node.id,
        node_name=node.name,
        address=row["address"],
        replica_index=replica_index,
    )
