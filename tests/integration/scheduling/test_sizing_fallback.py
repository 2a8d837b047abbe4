"""When the registry cannot be read, sizing falls back to this host and the `cluster` object is absent."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from corral.frontend.admin.resources import build_resources_router
from corral.frontend.state import FrontendState
from corral.models.config import ModelConfig
from corral.store import db


async def test_an_unreadable_registry_means_no_cluster_object_and_local_verdicts(
    make_database: Callable[[], str], tmp_path: Path
) -> None:
    (tmp_path / "m.bin").write_bytes(b"x" * 1000)
    pool = await db.connect(make_database())
    await db.migrate(pool)
    await pool.execute(
        "INSERT INTO backend_nodes (id, name, status, total_vram) VALUES ('n', 'gpu', 'healthy', 1)"
    )
    await pool.close()  # every later read fails
    none: Any = None
    cfg = ModelConfig(name="m", backend="simulator", model="m.bin", models_dir=tmp_path)
    state = FrontendState(
        pool=pool, nc=none, router=none, configs={"m": cfg}, registration_token="", auto_approve_nodes=True
    )
    app = FastAPI()
    app.include_router(build_resources_router(state))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://f") as client:
        resources = (await client.get("/api/resources")).json()
        models = (await client.get("/api/models")).json()
    assert "cluster" not in resources and "cluster" not in models
    assert models["models"] == [
        {
            "name": "m",
            "backend": "simulator",
            "memory_bytes": 1000,
            "fits": True,
            "capabilities": ["chat", "embeddings", "transcription", "tts", "image"],
            "fits_on": "this host",
            "verdict": "Fits on this host",
        }
    ]
