"""The traffic series on the real stack (issue 26): two frontends on one PostgreSQL and NATS, a worker, a simulator
model. Requests sent to frontend A show up in `GET /api/traffic` on frontend B after a sample interval (B merged A's
sample from NATS), the newest point moves after a burst, the nodes' memory and disk are there, and the route is for
admin keys only."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.cluster import Cluster
from support.faults import write_sim_model
from support.waiting import wait_for

pytestmark = pytest.mark.slow

SIM = "traffic-sim"
INTERVAL, INTERVAL_S = "1100ms", 1.1  # not a whole second: apart from other tests' frontends on a shared NATS
BURST = 12


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = Cluster(
        root=state_root / "e2e-traffic",
        database_url=make_database(),
        nats_url=nats_url,
        frontend_env={"CORRAL_TRAFFIC_SAMPLE_INTERVAL": INTERVAL},
    )
    write_sim_model(c.models_dir, SIM)
    yield from c.serving("w1", frontend_args=("--auth",))


@pytest.fixture(scope="module")
def frontend_b(cluster: Cluster) -> Iterator[str]:
    proc, url = cluster.spawn_frontend("frontend-b", "--auth")
    try:
        yield url
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def user_key(cluster: Cluster) -> str:
    created = httpx.post(
        f"{cluster.frontend_url}/api/keys",
        json={"name": "traffic", "role": "user"},
        headers=cluster.admin_headers,
    )
    assert created.status_code == 201, created.text
    return str(created.json()["key"])


def _traffic(cluster: Cluster, url: str, **params: str) -> dict[str, Any]:
    answer = httpx.get(f"{url}/api/traffic", params=params, headers=cluster.admin_headers, timeout=10)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _requests_after(series: dict[str, Any], since_s: float) -> float:
    """Requests counted in the intervals that ended after `since_s` (each point is a rate over its interval)."""
    counted = sum(
        (rate or 0.0) * INTERVAL_S
        for t, rate in zip(series["t"], series["requests_per_s"], strict=True)
        if t > since_s
    )
    return round(counted, 2)  # rates are rounded to 4 decimals


def _chat(client: httpx.Client, url: str, key: str, *, stream: bool = False) -> None:
    body = {"model": SIM, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": stream}
    answer = client.post(f"{url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code == 200, answer.text


def test_requests_to_one_frontend_show_on_the_other_after_an_interval(
    cluster: Cluster, frontend_b: str, user_key: str
) -> None:
    url_a = cluster.frontend_url
    with httpx.Client(timeout=120) as client:
        _chat(client, url_a, user_key)  # the load happens here, not in the burst
        before = _traffic(cluster, frontend_b, window="60", model=SIM)
        for i in range(BURST):
            _chat(client, url_a, user_key, stream=i % 2 == 0)
    interval_s = before["interval_s"]
    assert interval_s == INTERVAL_S
    # A reads its counters a little into each interval and files them under the interval that just ended: a
    # request counted after B's `now` can be filed under an interval that ended up to one interval before it
    burst_start_s = before["now"] - INTERVAL_S

    def counted_on_b() -> bool:
        series = _traffic(cluster, frontend_b, window="60", model=SIM)["models"].get(SIM)
        return series is not None and _requests_after(series, burst_start_s) >= BURST

    wait_for(counted_on_b, f"frontend B's series to count the {BURST} requests sent to A", timeout_s=30)
    body = _traffic(cluster, frontend_b, window="60", model=SIM)
    model, cluster_series = body["models"][SIM], body["cluster"]
    moved = [
        i for i, t in enumerate(model["t"]) if t > burst_start_s and (model["requests_per_s"][i] or 0) > 0
    ]
    assert moved, model
    assert all(
        model["latency_p50_ms"][i] is not None for i in moved
    )  # every interval with requests has latency
    assert any(
        model["ttft_p95_ms"][i] is not None for i in moved
    )  # the streamed ones timed their first token
    assert _requests_after(cluster_series, burst_start_s) >= BURST  # the cluster holds the model's
    assert set(model) == {
        "t",
        "requests_per_s",
        "errors_per_s",
        "ttft_p50_ms",
        "ttft_p95_ms",
        "latency_p50_ms",
        "latency_p95_ms",
        "tokens_in_per_s",
        "tokens_out_per_s",
        "in_flight",
        "queued",
        "loads",
        "evictions",
    }
    assert all(len(values) == len(model["t"]) for values in model.values())
    # and frontend A answers alike for the intervals both hold
    mine = _traffic(cluster, url_a, window="60", model=SIM)["models"][SIM]
    common = set(mine["t"]) & set(model["t"])

    def rates(series: dict[str, Any]) -> dict[float, float]:
        return {t: r for t, r in zip(series["t"], series["requests_per_s"], strict=True) if t in common and r}

    assert rates(mine) == rates(model)


def test_the_newest_point_moves_after_a_burst(cluster: Cluster, frontend_b: str, user_key: str) -> None:
    url_a = cluster.frontend_url

    def newest() -> tuple[float, float | None]:
        series = _traffic(cluster, frontend_b, window="10", model=SIM)["models"][SIM]
        return series["t"][-1], series["requests_per_s"][-1]

    with httpx.Client(timeout=120) as client:
        _chat(client, url_a, user_key)
        wait_for(lambda: newest()[1] == 0.0, "a quiet interval ending frontend B's series", timeout_s=30)
        quiet_t, _ = newest()
        for _ in range(BURST):
            _chat(client, url_a, user_key)

    def moved() -> bool:
        t, rate = newest()
        return (
            t > quiet_t
            and (rate or 0.0) > 0
            or _requests_after(_traffic(cluster, frontend_b, window="10", model=SIM)["models"][SIM], quiet_t)
            >= BURST
        )  # the burst may have ended an interval before the newest one

    wait_for(moved, "the newest points on frontend B to move after the burst", timeout_s=30)


def test_a_frontend_that_starts_later_takes_the_history_from_a_peer(
    cluster: Cluster, frontend_b: str
) -> None:
    held = _traffic(cluster, frontend_b, window="60", model=SIM)["models"][SIM]
    counted = _requests_after(held, 0.0)
    assert counted >= 2 * BURST  # the two bursts above
    proc, url_c = cluster.spawn_frontend("frontend-c", "--auth")
    try:
        body = _traffic(cluster, url_c, window="60", model=SIM)
        taken = _requests_after(body["models"][SIM], 0.0)
        assert taken >= counted, proc.log()[-3000:]  # the requests from before it started
    finally:
        proc.stop()


def test_the_nodes_memory_and_disk_are_in_the_series(cluster: Cluster, frontend_b: str) -> None:
    def has_w1() -> bool:
        nodes = _traffic(cluster, frontend_b, window="30")["nodes"]
        return any(n["name"] == "w1" and n["disk_free_bytes"][-1] for n in nodes.values())

    wait_for(has_w1, "node w1's figures in frontend B's series", timeout_s=30)
    nodes = _traffic(cluster, frontend_b, window="30", node="w1")["nodes"]
    [node] = nodes.values()
    assert node["name"] == "w1"
    assert node["ram_total_bytes"][-1] > 0
    assert set(node) == {
        "name",
        "t",
        "vram_used_bytes",
        "vram_total_bytes",
        "ram_used_bytes",
        "ram_total_bytes",
        "disk_free_bytes",
    }


def test_traffic_is_for_admin_keys_only(cluster: Cluster, frontend_b: str, user_key: str) -> None:
    url = f"{frontend_b}/api/traffic"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"Authorization": f"Bearer {user_key}"}).status_code == 403


@pytest.mark.parametrize("params, param", [({"window": "7200"}, "window"), ({"bogus": "1"}, "bogus")])
def test_a_bad_parameter_is_a_400_naming_it(cluster: Cluster, params: dict[str, str], param: str) -> None:
    answer = httpx.get(f"{cluster.frontend_url}/api/traffic", params=params, headers=cluster.admin_headers)
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == param
