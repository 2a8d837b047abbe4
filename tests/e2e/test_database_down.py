"""PostgreSQL stopped under a running frontend (issue 10 item 5): warm requests keep being served,
a cold request gets a 503 naming the database and its setting (never a 500), and everything recovers
when PostgreSQL returns — without restarting the frontend."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from corral.up.embedded import EmbeddedPostgres, embedded_postgres
from support.cluster import Cluster
from support.waiting import wait_for

pytestmark = pytest.mark.slow


@dataclass
class Env:
    cluster: Cluster
    pg: EmbeddedPostgres


@pytest.fixture(scope="module")
def env(state_root: Path, nats_url: str) -> Iterator[Env]:
    pg = embedded_postgres(state_root / "pg-down", fsync=False)  # this test's own server: it stops it
    pg.start()
    c = Cluster(
        root=state_root / "e2e-database-down", database_url=pg.create_database("corral"), nats_url=nats_url
    )
    c.models_dir.mkdir(parents=True, exist_ok=True)
    for name in ("warm", "cold", "later"):
        (c.models_dir / f"{name}.yaml").write_text(
            f"name: {name}\nbackend: simulator\ncontext_size: 512\nparameters:\n  model: {name}\n"
        )
    try:
        c.start_frontend()
        c.start_worker("w1")
        yield Env(c, pg)
    finally:
        c.stop()
        pg.stop(quiet=True)


def _chat(url: str, model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)


def test_database_down_serves_warm_requests_refuses_cold_ones_with_503_and_recovers(env: Env) -> None:
    url = env.cluster.frontend_url
    assert _chat(url, "warm").status_code == 200
    env.pg.stop()
    try:
        warm = [_chat(url, "warm") for _ in range(3)]
        cold = _chat(url, "cold")
        admin = httpx.get(f"{url}/api/nodes", headers={"Authorization": "Bearer never-seen-key"}, timeout=30)
        metrics = httpx.get(f"{url}/metrics", timeout=30)
    finally:
        env.pg.start()
    assert [r.status_code for r in warm] == [200, 200, 200]
    assert cold.status_code == 503, cold.text
    assert cold.headers["Retry-After"] == "5"
    error = cold.json()["error"]
    assert error["type"] == "service_unavailable" and error["code"] == 503
    assert error["message"].startswith("database unavailable: PostgreSQL: ")
    assert error["message"].endswith(" (LOCALAI_AUTH_DATABASE_URL / --database-url); retry shortly")
    assert admin.status_code == 503, admin.text  # the key lookup (access middleware) needed the database
    assert admin.json()["error"]["message"].startswith("database unavailable: PostgreSQL: ")
    assert (
        metrics.status_code == 200 and "\ncorral_cluster_figures_ok 0.0\n" in metrics.text
    )  # served, saying so
    assert 'corral_requests_total{model="warm",status="200"} 4.0' in metrics.text
    assert env.cluster.frontend is not None and env.cluster.frontend.popen.poll() is None
    wait_for(lambda: _chat(url, "later").status_code == 200, "a cold load after PostgreSQL came back", 60)
    assert _chat(url, "warm").status_code == 200
