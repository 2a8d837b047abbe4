"""Replay information (`model_load_infos`): what a model was last loaded with, so the reconciler can
load it again after a frontend restart without waiting for a request (reference §2.3)."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from corral.store.queries import q


@dataclass(frozen=True)
class LoadInfo:
    model: str
    backend: str
    options_blob: bytes  # protobuf-serialised, pre-staging ModelOptions (frontend-local paths)
    config_revision: str
    revision_established: bool = False  # a current revision is stored (and equals config_revision)


async def record(pool: asyncpg.Pool, info: LoadInfo) -> None:
    await pool.execute(
        q("load_info_upsert"), info.model, info.backend, info.options_blob, info.config_revision
    )


async def replayable(pool: asyncpg.Pool, model: str) -> LoadInfo | None:
    """The model's replay info if it matches the current config revision (or none is stored yet)."""
    row = await pool.fetchrow(q("load_info_replayable"), model)
    if row is None:
        return None
    return LoadInfo(
        row["model_name"],
        row["backend_type"],
        bytes(row["model_opts_blob"]),
        row["config_revision"],
        row["current_revision"] is not None,
    )
