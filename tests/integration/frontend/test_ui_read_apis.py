"""The small read APIs the web UI needs, against a real PostgreSQL: the label catalog (selector completion)
and the list of running loads (progress bars)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest
from fastapi import FastAPI

from corral.frontend.admin import nodes as admin_nodes
from corral.frontend.admin.models import build_models_router
from corral.frontend.admin.nodes import build_admin_nodes_router
from corral.frontend.errors import install_handlers
from corral.frontend.state import FrontendState


@pytest.fixture
async def api(pool: asyncpg.Pool) -> AsyncIterator[httpx.AsyncClient]:
    none: Any = None
    state = FrontendState(
        pool=pool, nc=none, router=none, configs={}, registration_token="", auto_approve_nodes=True
    )
    app = FastAPI()
    install_handlers(app)
    app.include_router(build_models_router(state))
    app.include_router(build_admin_nodes_router(state))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://frontend"
    ) as client:
        yield client


async def _node(pool: asyncpg.Pool, name: str, labels: dict[str, str]) -> str:
    node_id = str(uuid.uuid4())
    await pool.execute(
        "INSERT INTO backend_nodes (id, name, status) VALUES ($1, $2, 'healthy')", node_id, name
    )
    for key, value in labels.items():
        await pool.execute(
            "INSERT INTO node_labels (id, node_id, key, value) VALUES ($1, $2, $3, $4)",
            str(uuid.uuid4()),
            node_id,
            key,
            value,
        )
    return node_id


async def test_the_label_catalog_lists_each_key_with_its_distinct_values(
    api: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    assert (await api.get("/api/nodes/labels")).json() == {"labels": {}}
    await _node(pool, "a", {"zone": "eu-1", "gpu": "h100"})
    await _node(pool, "b", {"zone": "us-2", "gpu": "h100"})
    await _node(pool, "c", {"zone": "eu-1"})
    body = (await api.get("/api/nodes/labels")).json()
    assert body == {"labels": {"gpu": ["h100"], "zone": ["eu-1", "us-2"]}}


async def test_the_label_catalog_is_bounded(
    api: httpx.AsyncClient, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin_nodes, "LABEL_KEYS_MAX", 2)
    monkeypatch.setattr(admin_nodes, "LABEL_VALUES_MAX", 1)
    await _node(pool, "a", {"k1": "x", "k2": "y", "k3": "z"})
    await _node(pool, "b", {"k1": "w"})
    assert (await api.get("/api/nodes/labels")).json() == {"labels": {"k1": ["w"], "k2": ["y"]}}


async def test_running_and_failed_loads_are_listed_with_progress_and_error(
    api: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    assert (await api.get("/api/models/loads")).json() == {"loads": []}
    await pool.execute(
        "INSERT INTO model_load_jobs (tracking_key, state, node_name, bytes_sent, total_bytes, file_index, "
        "total_files, started_at) VALUES ('big', 'staging', 'gpu-a', 25, 100, 1, 1, now() - interval '5 seconds')"
    )
    await pool.execute(
        "INSERT INTO model_load_jobs (tracking_key, state, last_error, error_kind) "
        "VALUES ('broken', 'failed', 'loading model broken: out of memory', 'load')"
    )
    loads = {entry["model"]: entry for entry in (await api.get("/api/models/loads")).json()["loads"]}
    assert (
        loads["big"]["progress"] == 25.0 and loads["big"]["node"] == "gpu-a" and loads["big"]["error"] is None
    )
    assert loads["big"]["eta_seconds"] > 0
    assert loads["broken"]["state"] == "failed" and loads["broken"]["error"].endswith("out of memory")
    assert (await api.get("/api/models/big/load-status")).json()["progress"] == 25.0  # the same object
