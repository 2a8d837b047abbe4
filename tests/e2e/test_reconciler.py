"""Replica reconciler on real processes (frontend, workers, simulator backends, PostgreSQL, NATS):
recovery after a worker dies, static spread following nodes, burst scale-up and idle scale-down,
and a restarted frontend scaling up from `model_load_infos` alone."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from support.cluster import Cluster, Proc
from support.faults import write_sim_model
from support.processes import backend_alive
from support.waiting import wait_for

pytestmark = pytest.mark.slow

FAST = [
    "--reconciler-interval",
    "0.3s",
    "--stale-node-threshold",
    "4s",
    "--node-heartbeat-checkpoint",
    "1s",
    "--health-check-interval",
    "0.3s",
]
BEAT = ("--heartbeat-interval", "0.5s")


def _cluster(state_root: Path, make_database: Callable[[], str], nats_url: str, name: str) -> Cluster:
    c = Cluster(root=state_root / f"e2e-reconciler-{name}", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    return c


def _rows(c: Cluster, model: str) -> list[dict[str, Any]]:
    async def read() -> list[dict[str, Any]]:
        conn = await asyncpg.connect(c.database_url)
        try:
            rows = await conn.fetch(
                "SELECT n.name AS node, m.state, m.replica_index, m.address FROM node_models m "
                "JOIN backend_nodes n ON n.id = m.node_id WHERE m.model_name = $1 ORDER BY n.name, m.replica_index",
                model,
            )
            return [dict(r) for r in rows]
        finally:
            await conn.close()

    return asyncio.run(read())


def _loaded_on(c: Cluster, model: str) -> list[str]:
    return [r["node"] for r in _rows(c, model) if r["state"] == "loaded"]


def _wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    wait_for(predicate, what, timeout_s)


def _rule(c: Cluster, url: str, **body: Any) -> dict[str, Any]:
    response = httpx.post(f"{url}/api/nodes/scheduling", json=body, headers=c.admin_headers, timeout=10)
    assert response.status_code == 200, response.text
    return dict(response.json())


def _status(c: Cluster, model: str) -> dict[str, Any]:
    return dict(
        httpx.get(f"{c.frontend_url}/api/nodes/scheduling/{model}", headers=c.admin_headers).json()["status"]
    )


@pytest.fixture
def three_workers(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = _cluster(state_root, make_database, nats_url, "failover")
    write_sim_model(c.models_dir, "steady")
    (c.models_dir / "prod.yaml").write_text("name: prod\nalias: steady\n")  # a stable deployment slot
    try:
        c.start_frontend(*FAST)
        for name in ("w1", "w2", "w3"):
            c.start_worker(name, *BEAT)
        yield c
    finally:
        c.stop()


def test_a_replica_lost_with_its_worker_is_replaced_on_another_node(three_workers: Cluster) -> None:
    c = three_workers
    assert (
        httpx.post(f"{c.frontend_url}/api/nodes/scheduling", json={"model_name": "prod"}).status_code == 401
    )
    rule = _rule(
        c, c.frontend_url, model_name="prod", min_replicas=2
    )  # keyed by the alias; no request needed
    assert rule["target"] == "steady"
    _wait_for(lambda: len(_loaded_on(c, "steady")) == 2, "two replicas of steady")
    hosts = _loaded_on(c, "steady")
    assert len(set(hosts)) == 2  # one replica slot per node: two nodes
    victim = next(p for p in c.workers if p.name == hosts[0])
    victim.popen.send_signal(signal.SIGKILL)
    victim.popen.wait()
    spare = ({"w1", "w2", "w3"} - set(hosts)).pop()
    _wait_for(
        lambda: sorted(_loaded_on(c, "steady")) == sorted([hosts[1], spare]),
        f"a replacement replica on {spare} after {hosts[0]} died",
        timeout_s=45,
    )
    assert _status(c, "prod") == {
        "state": "active",
        "replicas": 2,
        "message": "2 replica(s) of steady loaded",
    }
    for name in ("prod", "steady"):  # one load serves both names
        answer = httpx.post(
            f"{c.frontend_url}/v1/chat/completions",
            timeout=30,
            json={"model": name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        )
        assert answer.status_code == 200, answer.text
    assert len(_rows(c, "steady")) == 2 and _rows(c, "prod") == []
    conflict = httpx.post(
        f"{c.frontend_url}/api/nodes/scheduling",
        json={"model_name": "steady", "min_replicas": 1},
        headers=c.admin_headers,
    )
    assert (
        conflict.status_code == 409
        and "governed by scheduling rule 'prod'" in conflict.json()["error"]["message"]
    )


@pytest.fixture
def spread_cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = _cluster(state_root, make_database, nats_url, "spread")
    write_sim_model(c.models_dir, "everywhere")
    c.frontend_env = {
        "LOCALAI_MODEL_SCHEDULING": json.dumps([{"model_name": "everywhere", "replicas": "all"}])
    }
    try:
        c.start_frontend(*FAST)
        c.start_worker("s1", *BEAT)
        yield c
    finally:
        c.stop()


def test_replicas_all_follows_nodes_joining_and_leaving(spread_cluster: Cluster) -> None:
    c = spread_cluster
    _wait_for(lambda: _loaded_on(c, "everywhere") == ["s1"], "the declared spread on s1")
    rule = httpx.get(f"{c.frontend_url}/api/nodes/scheduling/everywhere", headers=c.admin_headers).json()
    assert rule["spread_all"] is True and rule["declared"] is True
    joined = c.start_worker("s2", *BEAT)
    _wait_for(lambda: _loaded_on(c, "everywhere") == ["s1", "s2"], "a replica on the node that joined")
    joined.stop()  # graceful: drains, deregisters, its replica rows go
    c.workers.remove(joined)
    _wait_for(lambda: _loaded_on(c, "everywhere") == ["s1"], "the spread back to the remaining node")
    time.sleep(1.0)  # several passes: nothing else is loaded and nothing is reported unsatisfiable
    assert [r["node"] for r in _rows(c, "everywhere")] == ["s1"]
    assert _status(c, "everywhere")["state"] == "active"


def test_a_spread_replica_stops_exactly_when_its_node_stops_matching(spread_cluster: Cluster) -> None:
    c = spread_cluster
    _wait_for(lambda: _loaded_on(c, "everywhere") == ["s1"], "the declared spread on s1")
    node_id = next(
        n["id"]
        for n in httpx.get(f"{c.frontend_url}/api/nodes", headers=c.admin_headers).json()
        if n["name"] == "s1"
    )
    labels = f"{c.frontend_url}/api/nodes/{node_id}/labels"
    assert httpx.patch(labels, json={"zone": "a"}, headers=c.admin_headers).status_code == 200
    _rule(c, c.frontend_url, model_name="everywhere", replicas="all", node_selector={"zone": "a"})
    time.sleep(1.0)
    assert _loaded_on(c, "everywhere") == ["s1"]
    port = _rows(c, "everywhere")[0]["address"].rpartition(":")[2]
    assert httpx.delete(f"{labels}/zone", headers=c.admin_headers).status_code == 204
    _wait_for(
        lambda: _rows(c, "everywhere") == [], "the replica on the node that stopped matching is stopped"
    )
    _wait_for(lambda: not backend_alive(port, c.workers), "its exact backend process gone")


@pytest.fixture
def burst_cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = _cluster(state_root, make_database, nats_url, "burst")
    write_sim_model(c.models_dir, "bursty", "output_token_time_s:0.05")
    try:
        c.start_frontend(*FAST, "--scale-down-idle", "2s")
        c.start_worker("b1", *BEAT, "--max-replicas-per-model", "3")
        yield c
    finally:
        c.stop()


class _Burst:
    """Clients in threads sending requests back to back until stopped."""

    def __init__(self, url: str, concurrency: int) -> None:
        self.url, self.stop, self.served = url, threading.Event(), 0
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._client, daemon=True) for _ in range(concurrency)]

    def _client(self) -> None:
        body = {"model": "bursty", "messages": [{"role": "user", "content": "go"}], "max_tokens": 10}
        with httpx.Client(timeout=60) as client:
            while not self.stop.is_set():
                response = client.post(f"{self.url}/v1/chat/completions", json=body)
                if response.status_code != 200:
                    self.errors.append(response.text)
                self.served += 1

    def __enter__(self) -> _Burst:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)


def test_a_burst_scales_one_to_three_and_idle_replicas_scale_back_down(burst_cluster: Cluster) -> None:
    c = burst_cluster
    _rule(c, c.frontend_url, model_name="bursty", min_replicas=1, max_replicas=3)
    _wait_for(lambda: len(_loaded_on(c, "bursty")) == 1, "the minimum replica")

    with _Burst(c.frontend_url, concurrency=4) as burst:
        _wait_for(lambda: len(_loaded_on(c, "bursty")) == 3, "a scale-up to 3 replicas under the burst", 45)
        peak = _rows(c, "bursty")
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:  # still bursting: never above max_replicas
            assert len(_rows(c, "bursty")) <= 3
            time.sleep(0.1)
    assert burst.served > 0 and burst.errors == []
    assert [r["replica_index"] for r in peak] == [0, 1, 2]
    _wait_for(lambda: len(_rows(c, "bursty")) == 1, "idle replicas stopped down to the minimum", timeout_s=30)
    time.sleep(1.0)  # more passes: never below min_replicas
    kept = _rows(c, "bursty")
    assert len(kept) == 1 and kept[0]["state"] == "loaded"
    stopped_ports = [
        r["address"].rpartition(":")[2] for r in peak if r["replica_index"] != kept[0]["replica_index"]
    ]
    _wait_for(
        lambda: not any(backend_alive(p, c.workers) for p in stopped_ports), "the exact processes stopped"
    )
    assert backend_alive(kept[0]["address"].rpartition(":")[2], c.workers)
    assert c.frontend is not None
    decisions = [line for line in c.frontend.log().splitlines() if "replica reconciler:" in line]
    assert sum("(idle) for rule 'bursty'" in line for line in decisions) >= 2, "\n".join(decisions)


@pytest.fixture
def restart_cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = _cluster(state_root, make_database, nats_url, "restart")
    write_sim_model(c.models_dir, "replayed", "load_time_s:0.2")
    extra: list[Proc] = []
    c.extra = extra  # type: ignore[attr-defined]
    try:
        c.start_frontend(*FAST)
        c.start_worker("r1", *BEAT, "--max-replicas-per-model", "2")
        yield c
    finally:
        c.stop()
        for proc in extra:
            proc.stop()


def test_a_restarted_frontend_scales_up_from_replay_info_alone(restart_cluster: Cluster) -> None:
    c = restart_cluster
    first = httpx.post(
        f"{c.frontend_url}/v1/chat/completions",
        timeout=30,
        json={"model": "replayed", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    )
    assert first.status_code == 200, first.text
    assert c.frontend is not None
    c.frontend.stop()
    os.remove(c.models_dir / "replayed.yaml")  # the restarted frontend has no config for it: replay info only
    restarted, url = c.spawn_frontend("frontend-restarted", *FAST)
    c.extra.append(restarted)  # type: ignore[attr-defined]
    assert "0 model(s) configured" in restarted.log()
    _rule(c, url, model_name="replayed", min_replicas=2)
    _wait_for(lambda: len(_loaded_on(c, "replayed")) == 2, "a second replica loaded from model_load_infos")
    assert [r["replica_index"] for r in _rows(c, "replayed")] == [0, 1]
    assert "loaded a replica of replayed" in restarted.log()
