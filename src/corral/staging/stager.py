"""Stage a model's files to the worker that will load it, and rewrite its options for that worker.

`stage_model` is the one entry the load path calls; the mode (HTTP to the worker's file
server today; shared models and S3 later) is decided here, not by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx

from corral.models.config import ModelConfig
from corral.proto import backend_pb2
from corral.staging.keys import storage_key
from corral.staging.uploader import stage_file


class StagingProgress(Protocol):
    def on_file(self, index: int, total_files: int, total_bytes: int) -> None: ...
    def on_bytes(self, bytes_sent: int, total_bytes: int) -> None: ...
    def on_hash(self, done_bytes: int, total_bytes: int) -> None: ...


@dataclass(frozen=True)
class StagingTarget:
    """The worker to stage to."""

    node_name: str
    http_address: str


@dataclass(frozen=True)
class StagingContext:
    """Everything staging needs, built once per frontend from its settings."""

    http: httpx.AsyncClient
    token: str

    @classmethod
    def from_settings(cls, settings: Any, http: httpx.AsyncClient) -> StagingContext:
        return cls(http=http, token=settings.registration_token)


async def stage_model(ctx: StagingContext, target: StagingTarget, cfg: ModelConfig,
                      opts: backend_pb2.ModelOptions, progress: StagingProgress) -> backend_pb2.ModelOptions:
    """Upload every local file of the model; return a copy of `opts` with worker paths."""
    files = cfg.files()
    base_url = f"http://{target.http_address}"
    remote: dict[Path, str] = {}
    for index, path in enumerate(files, start=1):
        progress.on_file(index, len(files), path.stat().st_size)
        key = storage_key(cfg.name, path, cfg.models_dir)
        remote[path] = await stage_file(ctx.http, base_url, key, path, ctx.token, on_progress=progress.on_bytes)
    staged = backend_pb2.ModelOptions()
    staged.CopyFrom(opts)
    main = cfg.model_file
    if main is not None and main in remote:
        staged.ModelFile = remote[main]
        depth = 1 if Path(cfg.model).is_absolute() else len(Path(cfg.model).parts)
        staged.ModelPath = str(Path(remote[main]).parents[depth - 1])
    return staged
