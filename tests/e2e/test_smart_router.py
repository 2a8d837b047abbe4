"""SmartRouter on real parts: exact in-flight-safe eviction across two frontends, selectors, disk
headroom toggled at runtime, no-responders demotion, the explain API and the node header."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import pytest

from corral.models.tiny_gguf import write_tiny_llama
from support.cluster import Cluster, Proc, free_port_pair, spawn, wait_http
from support.processes import backend_alive

pytestmark = pytest.mark.slow


@dataclass
class Env:
    cluster: Cluster
    f1: str
    f2: str
    worker: Proc
    admin: dict[str, str]


def _yaml(models_dir: Path, name: str, *options: str, context: int = 512, selector: str = "") -> None:
    opts = "".join(f'\n  - "{o}"' for o in options) or " []"
    (models_dir / f"{name}.yaml").write_text(
        f"name: {name}\nbackend: simulator\ncontext_size: {context}\nparameters:\n  model: tiny.gguf\n"
        f"options:{opts}\n{selector}"
    )


@pytest.fixture(scope="module")
def env(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Env]:
    c = Cluster(root=state_root / "e2e-smart-router", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    write_tiny_llama(c.models_dir / "tiny.gguf")  # ~0.3 MB weights: with a 512 context it needs ~0.4 MiB
    _yaml(c.models_dir, "m1", "output_token_time_s:0.2")
    _yaml(c.models_dir, "m2")
    _yaml(c.models_dir, "big", context=3584)  # ~1.15 MiB: fits only once one ~0.4 MiB replica is gone
    _yaml(c.models_dir, "not-on-gpu", selector='node_selector:\n  "!gpu.vendor": "nvidia"\n')
    _yaml(c.models_dir, "ghost-only", selector="node_selector:\n  node.name: ghost-full\n")
    fake_bin = c.root / "fake-bin"
    fake_bin.mkdir(parents=True, exist_ok=True)
    smi = fake_bin / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '2, 1'\n")  # 2 MiB total, 1 MiB free: room for two small models
    smi.chmod(0o755)
    extra: list[Proc] = []
    try:
        c.start_frontend(
            "--expose-node-header", "--node-heartbeat-checkpoint", "1s"
        )  # beats end reservations
        f2, url2 = c.spawn_frontend("frontend-2")
        extra.append(f2)
        base = free_port_pair()
        worker = spawn(
            "gpu-w",
            c.worker_argv("gpu-w", base),
            c.root / "logs",
            env={"PATH": f"{fake_bin}:{os.environ['PATH']}"},
        )
        wait_http(f"http://127.0.0.1:{base - 1}/readyz", worker)
        c.workers.append(worker)
        yield Env(c, c.frontend_url, url2, worker, c.admin_headers)
    finally:
        c.stop()
        for proc in extra:
            proc.stop()


def _chat(url: str, model: str, **extra: object) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, **extra}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)


async def _replicas(env: Env) -> dict[str, tuple[str, str]]:
    conn = await asyncpg.connect(env.cluster.database_url)
    try:
        rows = await conn.fetch("SELECT model_name, state, address FROM node_models")
        return {r["model_name"]: (r["state"], r["address"]) for r in rows}
    finally:
        await conn.close()


async def _reserved_vram(env: Env) -> int:
    conn = await asyncpg.connect(env.cluster.database_url)
    try:
        return int(await conn.fetchval("SELECT reserved_vram FROM backend_nodes WHERE name = 'gpu-w'"))
    finally:
        await conn.close()


async def test_eviction_stops_exactly_the_idle_replica_and_never_one_busy_on_another_frontend(
    env: Env,
) -> None:
    first = _chat(env.f1, "m1")
    assert first.status_code == 200
    assert first.headers["X-LocalAI-Node"]  # LOCALAI_EXPOSE_NODE_HEADER on frontend 1
    async with httpx.AsyncClient(timeout=60) as client:
        body = {
            "model": "m1",
            "messages": [{"role": "user", "content": "long"}],
            "max_tokens": 60,
            "stream": True,
        }
        async with client.stream("POST", f"{env.f2}/v1/chat/completions", json=body) as stream:  # busy on F2
            chunks = stream.aiter_lines()
            await chunks.__anext__()
            assert _chat(env.f1, "m2").status_code == 200  # m2 is now the most recently used
            rows = await _replicas(env)
            m1_port, m2_port = rows["m1"][1].rpartition(":")[2], rows["m2"][1].rpartition(":")[2]
            await asyncio.sleep(1.0)  # in-flight reports propagate
            deadline = time.monotonic() + 20
            while await _reserved_vram(env) and time.monotonic() < deadline:  # a beat reports the 1 MiB free
                await asyncio.sleep(0.2)
            big = await client.post(
                f"{env.f1}/v1/chat/completions",
                json={"model": "big", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2},
            )
            assert big.status_code == 200, big.text
            rows = await _replicas(env)
            assert "m1" in rows and "m2" not in rows  # the LRU replica m1 was busy elsewhere: m2 went
            assert backend_alive(m1_port, env.cluster.workers) and not backend_alive(
                m2_port, env.cluster.workers
            )
            rest = [line async for line in chunks]
    assert rest[-2:] == ["data: [DONE]", ""] or "data: [DONE]" in rest  # the busy stream finished intact


def test_negated_selectors_keep_a_model_off_matching_nodes(env: Env) -> None:
    response = _chat(env.f1, "not-on-gpu")
    assert response.status_code == 503
    assert response.json()["error"]["message"] == "scheduling not-on-gpu: 0/1 nodes fit: 1 selector mismatch"
    [reason] = response.json()["rejections"]  # the structured reasons ride along
    assert reason["node"] == "gpu-w" and reason["reason"] == "selector mismatch"
    assert "gpu.vendor must not be 'nvidia'" in reason["detail"]


GHOST_TOKENS: dict[str, str] = {}  # ghost name -> the credential its first registration returned


def _register_ghost(env: Env, name: str, **facts: object) -> str:
    body = {
        "name": name,
        "address": "127.0.0.1:1",
        "http_address": "127.0.0.1:2",
        "token": env.cluster.token,
        **facts,
    }
    headers = {"Authorization": f"Bearer {env.cluster.token}"}
    if name in GHOST_TOKENS:  # registering a known name again needs its own credential
        headers["X-Node-Token"] = GHOST_TOKENS[name]
    response = httpx.post(f"{env.f1}/api/node/register", json=body, headers=headers)
    assert response.status_code == 201, response.text
    GHOST_TOKENS.setdefault(name, response.json().get("node_token", ""))
    node_id: str = response.json()["id"]
    return node_id


def test_disk_check_is_toggled_at_runtime_without_restart(env: Env) -> None:
    _register_ghost(env, "ghost-full", total_disk=100 * 1000**3, available_disk=0)
    explain = httpx.get(
        f"{env.f1}/api/nodes/scheduling/explain", params={"model": "ghost-only"}, headers=env.admin
    ).json()
    assert explain["chosen"] is None
    assert "no node has enough free disk for the model" in explain["error"]
    assert "ghost-full has 0 B free of 100.0 GB" in explain["error"]
    off = httpx.post(
        f"{env.f2}/api/settings", json={"distributed_disk_headroom_check": False}, headers=env.admin
    )
    assert off.status_code == 200 and off.json()["distributed_disk_headroom_check"] is False
    explain = httpx.get(
        f"{env.f1}/api/nodes/scheduling/explain", params={"model": "ghost-only"}, headers=env.admin
    ).json()
    assert explain["chosen"] == "ghost-full" and "DISABLED" in explain["warnings"][0]
    bad = httpx.post(
        f"{env.f1}/api/settings", json={"distributed_disk_headroom_check": "no"}, headers=env.admin
    )
    assert bad.status_code == 400 and "distributed_disk_headroom_check" in bad.json()["error"]["message"]
    httpx.post(f"{env.f1}/api/settings", json={"distributed_disk_headroom_check": True}, headers=env.admin)


async def test_a_node_that_does_not_answer_on_the_bus_is_demoted_and_another_is_used(env: Env) -> None:
    _register_ghost(env, "ghost-idle", total_vram=80 << 30, available_vram=80 << 30)  # the best-looking node
    _yaml(env.cluster.models_dir, "m2")
    response = _chat(env.f2, "m2")
    assert response.status_code == 200, response.text
    conn = await asyncpg.connect(env.cluster.database_url)
    try:
        status = await conn.fetchval("SELECT status FROM backend_nodes WHERE name = 'ghost-idle'")
    finally:
        await conn.close()
    assert status == "unhealthy"
    deadline = time.monotonic() + 5
    assert env.cluster.frontend is not None
    while "Scheduled node is not answering on the bus" not in env.cluster.frontend.log() + _f2_log(env):
        assert time.monotonic() < deadline
        time.sleep(0.1)


def _f2_log(env: Env) -> str:
    return (env.cluster.root / "logs" / "frontend-2.log").read_text(errors="replace")


async def test_an_admin_vram_budget_is_validated_and_sticky_across_re_registration(env: Env) -> None:
    node_id = _register_ghost(env, "ghost-budget", total_vram=80 << 30, available_vram=80 << 30)
    url = f"{env.f1}/api/nodes/{node_id}/vram-budget"
    assert httpx.put(url, json={"value": "10GiB"}).status_code in (401, 403)  # admin only
    bad = httpx.put(url, json={"value": "lots"}, headers=env.admin)
    assert bad.status_code == 400 and "'lots'" in bad.json()["error"]["message"]
    assert httpx.put(url, json={"value": "10GiB"}, headers=env.admin).json() == {"vram_budget": "10GiB"}
    _register_ghost(env, "ghost-budget", total_vram=80 << 30, available_vram=80 << 30, vram_budget="90%")
    conn = await asyncpg.connect(env.cluster.database_url)
    try:
        row = await conn.fetchrow(
            "SELECT vram_budget, vram_budget_bytes FROM backend_nodes WHERE id = $1", node_id
        )
    finally:
        await conn.close()
    assert (row["vram_budget"], row["vram_budget_bytes"]) == ("10GiB", 10 << 30)
    assert httpx.delete(url, headers=env.admin).json() == {"reset": True}
