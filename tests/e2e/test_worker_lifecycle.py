"""Worker behaviour with real processes: exact stops over NATS, readiness, no orphaned backends."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import asyncpg
import httpx
import nats
import pytest

from corral.bus.messages import ModelStopReply, ModelStopRequest
from corral.up.embedded import EmbeddedNats, embedded_nats
from support.cluster import Cluster, Proc, free_port_pair, spawn, wait_http
from support.processes import backend_pid, gone
from support.waiting import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def own_nats(state_root: Path) -> Iterator[EmbeddedNats]:
    server = embedded_nats(state_root / "lifecycle-nats")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], own_nats: EmbeddedNats) -> Iterator[Cluster]:
    c = Cluster(root=state_root / "e2e-lifecycle", database_url=make_database(), nats_url=own_nats.url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    for name in ("sim-a", "sim-b"):
        (c.models_dir / f"{name}.yaml").write_text(
            f"name: {name}\nbackend: simulator\nparameters:\n  model: {name}\n"
        )
    try:
        c.start_frontend()
        c.start_worker("w1")
        yield c
    finally:
        c.stop()


def _chat(cluster: Cluster, model: str) -> httpx.Response:
    return httpx.post(
        f"{cluster.frontend_url}/v1/chat/completions",
        timeout=60,
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
    )


async def _rows(cluster: Cluster) -> dict[str, asyncpg.Record]:
    conn = await asyncpg.connect(cluster.database_url)
    try:
        rows = await conn.fetch(
            "SELECT m.*, n.id AS nid FROM node_models m JOIN backend_nodes n ON n.id = m.node_id"
        )
        return {r["model_name"]: r for r in rows}
    finally:
        await conn.close()


async def test_model_stop_over_nats_stops_exactly_that_process(cluster: Cluster) -> None:
    for model in ("sim-a", "sim-b"):
        response = _chat(cluster, model)
        assert response.status_code == 200, response.text
    rows = await _rows(cluster)
    port_a, port_b = (rows[m]["address"].rpartition(":")[2] for m in ("sim-a", "sim-b"))
    pid_a, pid_b = backend_pid(port_a, cluster.workers), backend_pid(port_b, cluster.workers)
    assert pid_a and pid_b
    nc = await nats.connect(cluster.nats_url)
    try:
        request = ModelStopRequest(
            model_name="sim-a", process_key="sim-a#0", expected_address=rows["sim-a"]["address"]
        )
        msg = await nc.request(f"nodes.{rows['sim-a']['nid']}.model.stop", request.to_json(), timeout=15)
        reply = ModelStopReply.from_json(msg.data)
        assert reply.matched and reply.terminated and reply.error is None
        again = ModelStopReply.from_json(
            (await nc.request(f"nodes.{rows['sim-a']['nid']}.model.stop", request.to_json(), timeout=15)).data
        )
        assert again.terminated and not again.matched  # idempotent
    finally:
        await nc.close()
    assert gone(pid_a)
    os.kill(pid_b, 0)  # the other model's process is untouched
    assert _chat(cluster, "sim-a").status_code == 200  # and the stopped model reloads on demand


def test_worker_readiness_follows_the_nats_link(cluster: Cluster, own_nats: EmbeddedNats) -> None:
    ready = f"http://127.0.0.1:{cluster.worker_ports[0] - 1}/readyz"
    assert httpx.get(ready).status_code == 200
    own_nats.stop()
    deadline = time.monotonic() + 15
    while httpx.get(ready).status_code == 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    response = httpx.get(ready)
    assert response.status_code == 503 and "NATS" in response.text
    assert httpx.get(f"http://127.0.0.1:{cluster.worker_ports[0] - 1}/healthz").status_code == 200
    own_nats.start()
    deadline = time.monotonic() + 30
    while httpx.get(ready).status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert httpx.get(ready).status_code == 200


async def _install_simulator(cluster: Cluster, node_name: str, model_id: str) -> str:
    """Ask worker `node_name` over NATS to start a simulator backend for `model_id`; the port it listens on."""
    conn = await asyncpg.connect(cluster.database_url)
    try:
        node_id = await conn.fetchval("SELECT id FROM backend_nodes WHERE name = $1", node_name)
    finally:
        await conn.close()
    nc = await nats.connect(cluster.nats_url)
    try:
        request = {"backend": "simulator", "model_id": model_id, "replica_index": 0}
        msg = await nc.request(f"nodes.{node_id}.backend.install", json.dumps(request).encode(), timeout=30)
    finally:
        await nc.close()
    return str(json.loads(msg.data)["address"]).rpartition(":")[2]


async def test_backends_die_with_a_killed_worker(cluster: Cluster) -> None:
    base = free_port_pair()
    worker = spawn("w-doomed", cluster.worker_argv("w-doomed", base), cluster.root / "logs")
    wait_http(f"http://127.0.0.1:{base - 1}/readyz", worker)
    pid = backend_pid(await _install_simulator(cluster, "w-doomed", "orphan-check"), [worker])
    assert pid is not None
    worker.popen.send_signal(signal.SIGKILL)
    worker.popen.wait(10)
    assert gone(pid)


def test_worker_sigterm_stops_its_backends_and_exits_zero(cluster: Cluster) -> None:
    base = free_port_pair()
    worker = spawn("w-term", cluster.worker_argv("w-term", base), cluster.root / "logs")
    wait_http(f"http://127.0.0.1:{base - 1}/readyz", worker)
    assert worker.stop() == 0
    assert "Traceback" not in worker.log()


def _spare_pid(worker_log: str, backend: str) -> int:
    match = re.search(rf"backend {backend} for spare:{backend} ready on port \d+ \(pid (\d+)\)", worker_log)
    assert match, f"no spare {backend} process started:\n{worker_log[-3000:]}"
    return int(match.group(1))


def _wait_log(worker: Proc, text: str) -> str:
    wait_for(lambda: text in worker.log(), f"the worker to log {text!r}", 60)
    return worker.log()


async def test_a_cold_load_is_served_by_the_workers_spare_process(cluster: Cluster) -> None:
    """--backend-prestart: the worker keeps a started backend process; the first load of a model takes it (the
    replica's address is the spare's port, its pid the spare's), and the worker's SIGTERM stops spare and all."""
    base = free_port_pair()
    worker = spawn(
        "w-spare",
        [*cluster.worker_argv("w-spare", base), "--backend-prestart=simulator"],
        cluster.root / "logs",
    )
    wait_http(f"http://127.0.0.1:{base - 1}/readyz", worker)
    spare_pid = _spare_pid(_wait_log(worker, "for spare:simulator ready"), "simulator")
    assert backend_pid(await _install_simulator(cluster, "w-spare", "spare-check"), [worker]) == spare_pid
    assert "took the spare process" in worker.log()
    assert worker.stop() == 0
    assert gone(spare_pid)


def test_a_worker_keeps_a_llama_cpp_spare_by_default_and_stops_it_with_itself(cluster: Cluster) -> None:
    base = free_port_pair()
    argv = [arg for arg in cluster.worker_argv("w-default", base) if not arg.startswith("--backend-prestart")]
    worker = spawn("w-default", argv, cluster.root / "logs")
    wait_http(f"http://127.0.0.1:{base - 1}/readyz", worker)
    spare_pid = _spare_pid(_wait_log(worker, "for spare:llama-cpp ready"), "llama-cpp")
    assert worker.stop() == 0
    assert gone(spare_pid)
