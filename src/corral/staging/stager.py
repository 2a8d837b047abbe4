"""Put a model's files on the worker that will load it, and rewrite its options for that worker.

`stage_model` is the one entry the load path calls; the mode is decided here, not by the caller:

* managed Hugging Face artifact: the frontend first resolves and downloads the snapshot (HF_TOKEN is
  used only here), then stages it like any other directory;
* shared models (``LOCALAI_DISTRIBUTED_SHARED_MODELS``): nothing is copied, absolute paths pass through;
* S3 (``LOCALAI_STORAGE_URL``): upload to the bucket, the worker fetches over ``nodes.<id>.files.ensure``;
* otherwise HTTP to the worker's file server (resumable, verified, skipped when already there).

Progress goes to the load job: ``on_file`` per file, ``on_bytes`` against the file's size (seeded with
a resume offset), ``on_hash`` while hashing -- so a long verify never looks like a stall.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
from nats.aio.client import Client

from corral.models.config import ModelConfig
from corral.proto import backend_pb2
from corral.staging.hub_download import HubClient
from corral.staging.local_hash import local_sha256
from corral.staging.plan import (
    StagingPlan,
    build_plan,
    local_paths_for_shared,
    remote_base,
    rewrite_for_worker,
)
from corral.staging.s3 import ObjectStore, StorageConfig
from corral.staging.s3_stager import S3Target, ensure_on_worker, upload_to_bucket
from corral.staging.uploader import stage_file, threadsafe_progress

log = logging.getLogger(__name__)

DEFAULT_STALL_S = 300.0
HASH_REPORT_EVERY_BYTES = 16 << 20


class StagingProgress(Protocol):
    def on_file(self, index: int, total_files: int, total_bytes: int) -> None: ...
    def on_bytes(self, bytes_sent: int, total_bytes: int) -> None: ...
    def on_hash(self, done_bytes: int, total_bytes: int) -> None: ...


@dataclass(frozen=True)
class StagingTarget:
    """The worker to stage to (``node_id`` is needed for S3 mode's NATS subjects)."""

    node_name: str
    http_address: str
    node_id: str = ""


@dataclass(frozen=True)
class StagingContext:
    """Everything staging needs, built once per frontend from its settings."""

    http: httpx.AsyncClient
    token: str
    shared_models: bool = False
    object_store: ObjectStore | None = None
    hub: HubClient | None = None
    nc: Client | None = None
    stall_s: float = DEFAULT_STALL_S

    @classmethod
    def from_settings(
        cls, settings: Any, http: httpx.AsyncClient, nc: Client | None = None
    ) -> StagingContext:
        storage = StorageConfig.from_settings(settings)
        store = ObjectStore(storage) if storage is not None else None
        if store is not None:
            store.ensure_bucket()
        hub = HubClient(
            getattr(settings, "hf_endpoint", "https://huggingface.co"),
            getattr(settings, "hf_token", "") or "",
        )
        return cls(
            http=http,
            token=settings.registration_token,
            shared_models=bool(getattr(settings, "distributed_shared_models", False)),
            object_store=store,
            hub=hub,
            nc=nc,
            stall_s=float(getattr(settings, "load_stall_window_s", DEFAULT_STALL_S)),
        )

    def with_bus(self, nc: Client) -> StagingContext:
        """This context with the frontend's NATS connection (S3 mode asks workers over it)."""
        return self if nc is self.nc else dataclasses.replace(self, nc=nc)


async def stage_model(
    ctx: StagingContext,
    target: StagingTarget,
    cfg: ModelConfig,
    opts: backend_pb2.ModelOptions,
    progress: StagingProgress,
) -> backend_pb2.ModelOptions:
    """Stage every local file of the model; return a copy of `opts` with the worker's paths."""
    if cfg.huggingface is not None:
        if ctx.hub is None:
            raise ValueError(
                f"model {cfg.name} names a Hugging Face repo but this frontend has no hub client"
            )
        await ctx.hub.ensure_snapshot(cfg.models_dir, cfg.huggingface, progress)
    plan = build_plan(cfg)  # refuses a file outside the model's roots (PathOutsideRoots), in every mode
    if ctx.shared_models:
        log.info(
            "shared models: %s loads from %s on node %s (no staging)",
            cfg.name,
            cfg.model_file,
            target.node_name,
        )
        return local_paths_for_shared(opts, cfg)
    if not plan.files:
        staged = backend_pb2.ModelOptions()
        staged.CopyFrom(opts)
        return staged
    if ctx.object_store is not None:
        remote = await _stage_via_s3(ctx, target, plan, progress)
    else:
        remote = await _stage_via_http(ctx, target, plan, progress)
    return rewrite_for_worker(opts, cfg, plan, remote_base(plan, remote))


async def _stage_via_http(
    ctx: StagingContext, target: StagingTarget, plan: StagingPlan, progress: StagingProgress
) -> dict[str, str]:
    base_url = f"http://{target.http_address}"
    remote: dict[str, str] = {}
    for index, planned in enumerate(plan.files, start=1):
        progress.on_file(index, len(plan.files), planned.size_bytes)
        remote[planned.key] = await stage_file(
            ctx.http,
            base_url,
            planned.key,
            planned.local_path,
            ctx.token,
            on_progress=progress.on_bytes,
            on_hash=progress.on_hash,
            record_hash=planned.record_hash,
        )
    log.info(
        "staged %d file(s) of %s (%d bytes) to node %s",
        len(plan.files),
        plan.tracking_key,
        plan.total_bytes,
        target.node_name,
    )
    return remote


async def _stage_via_s3(
    ctx: StagingContext, target: StagingTarget, plan: StagingPlan, progress: StagingProgress
) -> dict[str, str]:
    if ctx.nc is None or not target.node_id or ctx.object_store is None:
        raise ValueError("S3 staging needs the frontend's NATS connection and the target node id")
    s3_target = S3Target(ctx.nc, target.node_id, target.node_name, ctx.stall_s)
    remote: dict[str, str] = {}
    for index, planned in enumerate(plan.files, start=1):
        progress.on_file(index, len(plan.files), planned.size_bytes)
        local_hash = await local_sha256(
            planned.local_path,
            threadsafe_progress(progress.on_hash, HASH_REPORT_EVERY_BYTES),
            record=planned.record_hash,
        )
        await upload_to_bucket(ctx.object_store, planned, local_hash, progress.on_bytes)
        progress.on_file(index, len(plan.files), planned.size_bytes)  # now the worker's fetch
        reply = await ensure_on_worker(s3_target, planned, local_hash, progress.on_bytes)
        progress.on_bytes(planned.size_bytes, planned.size_bytes)
        remote[planned.key] = reply.local_path
    return remote
