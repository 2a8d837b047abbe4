"""Replay information: record what a model was loaded with, and rebuild a loadable config from it.

Recorded after every successful cold load (`model_load_infos`), so a frontend that restarted —
or one whose models directory lacks the model's YAML — can still load replicas for the
reconciler. The options are the pre-staging ones (frontend-local paths): staging rewrites them
for the chosen worker exactly as for a configured model.
"""

from __future__ import annotations

import logging
from pathlib import Path

import asyncpg

from corral.models.artifacts import REPEATED_FIELD, SCALAR_FIELDS, ArtifactPaths
from corral.models.config import ModelConfig
from corral.proto import backend_pb2
from corral.store import load_infos
from corral.store.load_infos import LoadInfo

log = logging.getLogger(__name__)


def replay_options(cfg: ModelConfig, opts: backend_pb2.ModelOptions) -> backend_pb2.ModelOptions:
    """The load options plus the companion artifacts (mmproj, lora, …) as configured."""
    full = backend_pb2.ModelOptions()
    full.CopyFrom(opts)
    for proto_field, value in cfg.artifacts.scalars:
        setattr(full, proto_field, value)
    getattr(full, REPEATED_FIELD).extend(cfg.artifacts.lora_adapters)
    return full


async def record(pool: asyncpg.Pool, cfg: ModelConfig, opts: backend_pb2.ModelOptions) -> None:
    """Persist replay info; a failure is logged, never fails the load that just succeeded."""
    blob = replay_options(cfg, opts).SerializeToString()
    try:
        await load_infos.record(pool, LoadInfo(cfg.name, cfg.backend, blob, cfg.revision))
    except (OSError, asyncpg.PostgresError) as exc:
        log.warning(
            "could not record replay info of %s (the reconciler needs a request to learn it): %s",
            cfg.name,
            exc,
        )


def config_from_replay(info: LoadInfo) -> ModelConfig:
    """A ModelConfig equivalent to the one the model was last loaded with."""
    opts = backend_pb2.ModelOptions.FromString(info.options_blob)
    scalars = tuple((f, getattr(opts, f)) for f in SCALAR_FIELDS.values() if getattr(opts, f))
    return ModelConfig(
        name=info.model,
        backend=info.backend,
        model=opts.ModelFile or opts.Model,
        models_dir=Path(opts.ModelPath or "."),
        context_size=opts.ContextSize,
        embeddings=opts.Embeddings,
        reranking=opts.Reranking,
        threads=opts.Threads,
        seed=opts.Seed,
        gpu_layers=opts.NGPULayers,
        options=tuple(opts.Options),
        artifacts=ArtifactPaths(scalars, tuple(getattr(opts, REPEATED_FIELD))),
        revision=info.config_revision if info.revision_established else "",
    )


async def replay_config(pool: asyncpg.Pool, model: str) -> ModelConfig | None:
    info = await load_infos.replayable(pool, model)
    return None if info is None else config_from_replay(info)
