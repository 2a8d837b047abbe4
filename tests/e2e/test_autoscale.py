"""Autoscaling on load on real parts (issue 25 item 5): a frontend with one slot per replica, a short reconciler
interval and fast load reports, a worker with room for two replicas, a simulator whose generations are slow.
Load makes requests queue past the rule's wait target: a second replica is added and the rule's explain says why;
the load stops: after the idle window the model goes back to its minimum, and with a minimum of 0 to zero."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from support.cluster import Cluster
from support.faults import write_sim_model
from support.waiting import wait_for

pytestmark = pytest.mark.slow

MODEL = "queued"
FAST = [
    "--reconciler-interval",
    "0.4s",
    "--load-report-interval",
    "0.2s",
    "--replica-slots",
    "1",
    "--stale-node-threshold",
    "4s",
    "--node-heartbeat-checkpoint",
    "1s",
    "--health-check-interval",
    "0.3s",
]
RULE = {
    "model_name": MODEL,
    "min_replicas": 1,
    "max_replicas": 2,
    "target_queue_wait_s": 0.2,
    "scale_down_idle_s": 2,
    "cooldown_s": 1,
}


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = Cluster(root=state_root / "e2e-autoscale", database_url=make_database(), nats_url=nats_url)
    write_sim_model(c.models_dir, MODEL, "output_token_time_s:0.1")  # 4 words: 0.4 s on the only slot
    try:
        c.start_frontend(*FAST)
        c.start_worker("w1", "--heartbeat-interval", "0.5s", "--max-replicas-per-model", "2")
        yield c
    finally:
        c.stop()


def _loaded(c: Cluster) -> int:
    async def count() -> int:
        conn = await asyncpg.connect(c.database_url)
        try:
            return int(
                await conn.fetchval("SELECT count(*) FROM node_models WHERE model_name = $1", MODEL) or 0
            )
        finally:
            await conn.close()

    return asyncio.run(count())


def _post_rule(c: Cluster, **changes: Any) -> None:
    response = httpx.post(
        f"{c.frontend_url}/api/nodes/scheduling",
        json={**RULE, **changes},
        headers=c.admin_headers,
        timeout=10,
    )
    assert response.status_code == 200, response.text


def _autoscale(c: Cluster) -> dict[str, Any]:
    rule = httpx.get(f"{c.frontend_url}/api/nodes/scheduling/{MODEL}", headers=c.admin_headers, timeout=10)
    return dict(rule.json()["autoscale"])


class _Load:
    """Clients in threads sending requests back to back until stopped."""

    def __init__(self, url: str, concurrency: int) -> None:
        self.url, self.stop, self.errors = url, threading.Event(), list[str]()
        self.threads = [threading.Thread(target=self._client, daemon=True) for _ in range(concurrency)]

    def _client(self) -> None:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "go"}], "max_tokens": 4}
        with httpx.Client(timeout=60) as client:
            while not self.stop.is_set():
                response = client.post(f"{self.url}/v1/chat/completions", json=body)
                if response.status_code != 200:
                    self.errors.append(response.text)

    def __enter__(self) -> _Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)


def test_queue_wait_over_target_adds_a_replica_and_idle_takes_it_back_to_the_minimum(
    cluster: Cluster,
) -> None:
    c = cluster
    _post_rule(c)
    wait_for(lambda: _loaded(c) == 1, "the rule's minimum replica", 30)
    with _Load(c.frontend_url, concurrency=3) as load:
        wait_for(lambda: _loaded(c) == 2, "a second replica for the queue wait over its target", 30)
        wait_for(
            lambda: "+1 replica (1 → 2)" in (_autoscale(c)["last_action"] or ""), "the action recorded", 10
        )
        action = _autoscale(c)["last_action"]  # read under load: nothing is idle yet
        explain = httpx.get(
            f"{c.frontend_url}/api/nodes/scheduling/explain", params={"model": MODEL}, headers=c.admin_headers
        ).json()
    assert load.errors == []
    assert "queue wait p95" in action and "> target 0.2 s" in action, action
    assert explain["autoscaling"]["rule"] == MODEL and explain["autoscaling"]["last_action"] == action
    history = httpx.get(f"{c.frontend_url}/api/operations/history", headers=c.admin_headers).json()
    scaled = [op for op in history["operations"] if op["taskType"] == "autoscale"]
    assert any(action in op["message"] for op in scaled), scaled

    wait_for(lambda: _loaded(c) == 1, "the idle replica stopped back to the minimum", 30)
    last = _autoscale(c)["last_action"]
    assert "-1 replica(s) (2 → 1): idle past the scale-down window" in last, last


def test_with_a_minimum_of_zero_an_idle_model_scales_to_zero_and_loads_again_on_demand(
    cluster: Cluster,
) -> None:
    c = cluster
    _post_rule(c, min_replicas=0)
    wait_for(lambda: _loaded(c) == 0, "every idle replica stopped (scale to zero)", 30)
    assert "-1 replica(s) (1 → 0)" in _autoscale(c)["last_action"]
    answer = httpx.post(
        f"{c.frontend_url}/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    assert _loaded(c) == 1
