"""Eviction frees room only on a node the model may use, exactly as much as the fit needs, or stops nothing
and says why (real frontend, two GPU-reporting workers, simulator backends, PostgreSQL, NATS)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from corral.models.tiny_gguf import write_tiny_llama
from support.cluster import Cluster, free_port_pair, spawn, wait_http
from support.waiting import wait_for

pytestmark = pytest.mark.slow


def _yaml(models_dir: Path, name: str, node: str, context: int) -> None:
    (models_dir / f"{name}.yaml").write_text(
        f"name: {name}\nbackend: simulator\ncontext_size: {context}\nparameters:\n  model: tiny.gguf\n"
        f"node_selector:\n  node.name: {node}\n"
    )


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = Cluster(root=state_root / "e2e-eviction-fit", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    write_tiny_llama(c.models_dir / "tiny.gguf")  # ~0.3 MB of weights + 256 B of KV cache per context token
    for name, node in (("b1", "gpu-b"), ("a1", "gpu-a"), ("a2", "gpu-a")):
        _yaml(c.models_dir, name, node, 1024)  # ~0.6 MB each
    _yaml(c.models_dir, "big-a", "gpu-a", 6144)  # ~1.9 MB: 1 MiB free + both replicas of gpu-a
    _yaml(c.models_dir, "huge-a", "gpu-a", 16384)  # ~4.5 MB: more than gpu-a can ever free
    fake_bin = c.root / "fake-bin"
    fake_bin.mkdir(parents=True, exist_ok=True)
    smi = fake_bin / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '8, 1'\n")  # 8 MiB total, 1 MiB free
    smi.chmod(0o755)
    try:
        c.start_frontend("--node-heartbeat-checkpoint", "1s")  # beats reach PostgreSQL (and end reservations)
        for name in ("gpu-a", "gpu-b"):
            base = free_port_pair()
            worker = spawn(
                name,
                c.worker_argv(name, base),
                c.root / "logs",
                env={"PATH": f"{fake_bin}:{os.environ['PATH']}"},
            )
            wait_http(f"http://127.0.0.1:{base - 1}/readyz", worker)
            c.workers.append(worker)
        yield c
    finally:
        c.stop()


def _chat(c: Cluster, model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    return httpx.post(f"{c.frontend_url}/v1/chat/completions", json=body, timeout=60)


async def _query(c: Cluster, sql: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(c.database_url)
    try:
        return list(await conn.fetch(sql))
    finally:
        await conn.close()


def _loaded(c: Cluster) -> dict[str, str]:
    rows = asyncio.run(
        _query(
            c,
            "SELECT m.model_name, n.name FROM node_models m JOIN backend_nodes n "
            "ON n.id = m.node_id WHERE m.state = 'loaded'",
        )
    )
    return {r["model_name"]: r["name"] for r in rows}


def _settled(c: Cluster) -> bool:
    """Every node's heartbeat reported the measured 1 MiB free since the last load (no soft reservation left)."""
    rows = asyncio.run(_query(c, "SELECT available_vram, reserved_vram FROM backend_nodes"))
    return len(rows) == 2 and all(r["available_vram"] == 1 << 20 and r["reserved_vram"] == 0 for r in rows)


@pytest.fixture(scope="module")
def three_small(cluster: Cluster) -> Cluster:
    for model in ("b1", "a1", "a2"):  # b1 (on gpu-b) is the least recently used of all
        wait_for(lambda: _settled(cluster), "heartbeats reporting 1 MiB free on both nodes", timeout_s=20)
        assert _chat(cluster, model).status_code == 200
    wait_for(lambda: _settled(cluster), "heartbeats reporting 1 MiB free on both nodes", timeout_s=20)
    assert _loaded(cluster) == {"b1": "gpu-b", "a1": "gpu-a", "a2": "gpu-a"}
    return cluster


def test_a_fit_no_eviction_can_make_stops_nothing_and_says_why(three_small: Cluster) -> None:
    response = _chat(three_small, "huge-a")
    assert response.status_code == 503, response.text
    message = response.json()["error"]["message"]
    assert message.startswith(
        "scheduling huge-a: no node it may use can be freed enough by eviction: it needs "
    )
    assert "but gpu-a has 1.0 MB free and " in message and " in 2 evictable replica(s) (total " in message
    assert message.endswith("; not allowed: 1 selector mismatch")
    assert _loaded(three_small) == {"b1": "gpu-b", "a1": "gpu-a", "a2": "gpu-a"}  # nothing was stopped
    wait_for(lambda: _settled(three_small), "heartbeats reporting 1 MiB free on both nodes", timeout_s=20)


def test_eviction_frees_as_many_replicas_as_the_fit_needs_and_only_where_the_model_may_run(
    three_small: Cluster,
) -> None:
    response = _chat(three_small, "big-a")
    assert response.status_code == 200, response.text
    assert _loaded(three_small) == {
        "b1": "gpu-b",
        "big-a": "gpu-a",
    }  # b1 was the LRU, but on a forbidden node
    log = three_small.frontend.log() if three_small.frontend else ""
    assert log.count("evicted a") == 2 and "evicted b1" not in log
    metrics = httpx.get(f"{three_small.frontend_url}/metrics").text  # each eviction is a routing decision
    assert 'corral_routing_decisions_total{decision="evict",model="a1"} 1.0' in metrics
    assert 'corral_routing_decisions_total{decision="evict",model="a2"} 1.0' in metrics
