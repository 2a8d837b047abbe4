"""A load whose node stops answering moves to the next eligible node before the waiting request sees a
failure (real frontend, two workers, PostgreSQL, NATS, simulator backends)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import pytest

from support.cluster import Cluster, Proc, free_port_pair, spawn, wait_http
from support.faults import write_sim_model
from support.proxy import ThrottlingProxy
from support.waiting import wait_for

pytestmark = pytest.mark.slow

MIB = 1 << 20


@dataclass
class Env:
    cluster: Cluster
    w1: Proc  # first choice (name order, both idle); its file server sits behind a slow proxy
    w2: Proc


@pytest.fixture
def env(
    state_root: Path, make_database: Callable[[], str], nats_url: str, request: pytest.FixtureRequest
) -> Iterator[Env]:
    c = Cluster(
        root=state_root / f"e2e-failover-{request.node.name[:40]}",
        database_url=make_database(),
        nats_url=nats_url,
    )
    c.models_dir.mkdir(parents=True, exist_ok=True)
    for name, size_mib in (("install-stall", 1), ("stage-stall", 48), ("stage-kill", 48)):
        write_sim_model(c.models_dir, name, file_bytes=size_mib * MIB)
    base = free_port_pair()
    # w1 stages slowly (progress is reported per 16 MiB piece: one every 2 s, inside the 3 s stall window)
    proxy = ThrottlingProxy(base - 1, upload_bytes_per_s=8 * MIB)
    try:
        c.start_frontend("--load-stall-window", "3s", "--backend-install-timeout", "2s")
        proxy.__enter__()
        w1 = spawn(
            "w1",
            [*c.worker_argv("w1", base), "--advertise-http-addr", f"127.0.0.1:{proxy.port}"],
            c.root / "logs",
        )
        wait_http(f"http://127.0.0.1:{base - 1}/readyz", w1)
        c.workers.append(w1)
        w2 = c.start_worker("w2")
        yield Env(c, w1, w2)
    finally:
        for proc in c.workers:
            if proc.popen.poll() is None:
                os.kill(proc.popen.pid, signal.SIGCONT)
        c.stop()
        proxy.__exit__()


def _chat_async(env: Env, model: str) -> tuple[threading.Thread, dict[str, httpx.Response]]:
    result: dict[str, httpx.Response] = {}
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    thread = threading.Thread(
        target=lambda: result.setdefault(
            "r", httpx.post(f"{env.cluster.frontend_url}/v1/chat/completions", json=body, timeout=90)
        )
    )
    thread.start()
    return thread, result


def _status(env: Env, model: str) -> dict[str, object]:
    response = httpx.get(f"{env.cluster.frontend_url}/api/models/{model}/load-status")
    return dict(response.json()) if response.status_code == 200 else {}


def _loaded_on(env: Env, model: str) -> list[str]:
    async def read() -> list[str]:
        conn = await asyncpg.connect(env.cluster.database_url)
        try:
            rows = await conn.fetch(
                "SELECT n.name FROM node_models m JOIN backend_nodes n ON n.id = m.node_id "
                "WHERE m.model_name = $1 AND m.state = 'loaded'",
                model,
            )
            return [r["name"] for r in rows]
        finally:
            await conn.close()

    return asyncio.run(read())


def _staging_on_w1(env: Env, model: str) -> bool:
    status = _status(env, model)
    return (
        status.get("node") == "w1" and status.get("state") == "staging" and int(str(status["bytes_sent"])) > 0
    )


def test_a_worker_stopped_before_it_answers_the_install_loses_the_load_to_the_other(env: Env) -> None:
    os.kill(env.w1.popen.pid, signal.SIGSTOP)  # connected to NATS, answers nothing: an install timeout
    thread, result = _chat_async(env, "install-stall")
    thread.join(90)
    response = result["r"]
    assert response.status_code == 200, response.text
    assert _loaded_on(env, "install-stall") == ["w2"]
    log = env.cluster.frontend.log() if env.cluster.frontend else ""
    assert (
        "loading install-stall: node w1: backend install: no reply on nodes." in log
        and "within 2s; raise LOCALAI_NATS_BACKEND_INSTALL_TIMEOUT if the worker is slow; trying the next "
        "eligible node"
        in log
    )


def test_a_worker_stopped_mid_staging_loses_the_load_to_the_other_within_the_stall_window(env: Env) -> None:
    thread, result = _chat_async(env, "stage-stall")
    wait_for(lambda: _staging_on_w1(env, "stage-stall"), "stage-stall staging to w1", timeout_s=30)
    os.kill(env.w1.popen.pid, signal.SIGSTOP)
    thread.join(90)
    response = result["r"]
    assert response.status_code == 200, response.text
    assert _loaded_on(env, "stage-stall") == ["w2"]
    log = env.cluster.frontend.log() if env.cluster.frontend else ""
    assert (
        "loading stage-stall: node w1: staging made no progress for 3s (stall window, CORRAL_LOAD_STALL_WINDOW): "
        "the worker stopped accepting data; trying the next eligible node"
    ) in log


def test_a_worker_killed_mid_staging_loses_the_load_to_the_other(env: Env) -> None:
    thread, result = _chat_async(env, "stage-kill")
    wait_for(lambda: _staging_on_w1(env, "stage-kill"), "stage-kill staging to w1", timeout_s=30)
    env.w1.popen.send_signal(signal.SIGKILL)
    env.w1.popen.wait(10)
    thread.join(90)
    response = result["r"]
    assert response.status_code == 200, response.text
    assert _loaded_on(env, "stage-kill") == ["w2"]
    log = env.cluster.frontend.log() if env.cluster.frontend else ""
    assert "loading stage-kill: node w1: " in log and "; trying the next eligible node" in log


def test_when_every_node_stops_answering_the_error_names_each_node_and_why(env: Env) -> None:
    os.kill(env.w1.popen.pid, signal.SIGSTOP)
    os.kill(env.w2.popen.pid, signal.SIGSTOP)
    thread, result = _chat_async(env, "install-stall")
    thread.join(90)
    response = result["r"]
    assert response.status_code == 502, response.text
    message = response.json()["error"]["message"]
    assert message.startswith(
        "loading model install-stall: 2 node(s) stopped answering (w1: backend install: no reply on nodes."
    )
    assert "; w2: backend install: no reply on nodes." in message
    assert message.endswith(
        "); no other node can take it: scheduling install-stall: no healthy worker node is "
        "registered (start `corral worker --register-to <frontend>`, or approve pending nodes)"
    )
