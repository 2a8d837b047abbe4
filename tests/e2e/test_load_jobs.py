"""Cold loads as durable jobs across frontends (real PostgreSQL, NATS, frontends, worker, backends)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import nats
import pytest
from nats.aio.msg import Msg

from corral.staging.hashing import read_trusted_hash
from support.cluster import Cluster, Proc, free_port_pair, spawn, wait_http
from support.faults import write_sim_model
from support.proxy import ThrottlingProxy
from support.waiting import wait_for

pytestmark = pytest.mark.slow

MIB = 1 << 20
WINDOW = "3s"  # shortened orphan and stall windows so the tests run in seconds


@dataclass
class Env:
    cluster: Cluster
    a: str  # frontend A
    b: str  # frontend B
    c: str  # frontend C: 1 s wait budget
    proxy: ThrottlingProxy
    worker: Proc


@pytest.fixture(scope="module")
def env(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Env]:
    c = Cluster(root=state_root / "e2e-load-jobs", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    write_sim_model(c.models_dir, "slow-40", "load_time_s:1.5", file_bytes=MIB)
    write_sim_model(
        c.models_dir, "broken", "load_fail:simulated CUDA out of memory while loading", file_bytes=MIB
    )
    write_sim_model(c.models_dir, "staged-slowly", file_bytes=12 * MIB)
    write_sim_model(c.models_dir, "install-overlaps", file_bytes=12 * MIB)
    write_sim_model(c.models_dir, "slow-dc", "load_time_s:2")
    write_sim_model(c.models_dir, "orphaned", "load_time_s:4")
    write_sim_model(c.models_dir, "stalled", file_bytes=48 * MIB)
    windows = ("--load-orphan-window", WINDOW, "--load-stall-window", WINDOW)
    frontends: list[Proc] = []
    base = free_port_pair()
    proxy = ThrottlingProxy(base - 1, upload_bytes_per_s=4 * MIB)
    try:
        c.start_frontend(*windows)
        fb, url_b = c.spawn_frontend("frontend-b", *windows)
        fc, url_c = c.spawn_frontend("frontend-c", *windows, "--model-load-wait", "1s")
        frontends += [fb, fc]
        proxy.__enter__()
        worker = spawn(
            "w1",
            [*c.worker_argv("w1", base), "--advertise-http-addr", f"127.0.0.1:{proxy.port}"],
            c.root / "logs",
        )
        wait_http(f"http://127.0.0.1:{base - 1}/readyz", worker)
        c.workers.append(worker)
        yield Env(c, c.frontend_url, url_b, url_c, proxy, worker)
    finally:
        os.kill(c.workers[0].popen.pid, signal.SIGCONT) if c.workers else None
        c.stop()
        for proc in frontends:
            proc.stop()
        proxy.__exit__()


def _chat_body(model: str) -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 3}


def _load_model_calls(env: Env, model: str) -> int:
    lines = [line for line in env.worker.log().splitlines() if f"[{model}#0]" in line]  # the backend's stderr
    return sum(
        1 for line in lines if "loaded model '" in line or ("LoadModel '" in line and "failed" in line)
    )


async def test_forty_concurrent_requests_on_two_frontends_load_the_model_once(env: Env) -> None:
    nc = await nats.connect(env.cluster.nats_url)
    installs: list[bytes] = []

    async def count(msg: Msg) -> None:
        installs.append(msg.data)

    sub = await nc.subscribe("nodes.*.backend.install", cb=count)
    model_file = env.cluster.models_dir / "slow-40.bin"
    wait_for(lambda: read_trusted_hash(model_file) is not None, "the frontends' pre-hash of slow-40.bin", 30)
    puts_before = env.proxy.puts
    try:
        async with httpx.AsyncClient(timeout=60) as client:
            responses = await asyncio.gather(
                *(
                    client.post(f"{(env.a, env.b)[i % 2]}/v1/chat/completions", json=_chat_body("slow-40"))
                    for i in range(40)
                )
            )
    finally:
        await sub.unsubscribe()
        await nc.close()
    assert [r.status_code for r in responses] == [200] * 40
    assert len([d for d in installs if b'"slow-40"' in d]) == 1
    assert env.proxy.puts - puts_before == 1  # one upload, in one PUT: its hash was known before it started
    assert _load_model_calls(env, "slow-40") == 1


async def test_the_backend_process_is_started_while_the_file_is_still_staging(env: Env) -> None:
    """The install request goes out before the upload ends (the proxy holds it to 4 MiB/s: 3 s for 12 MiB).
    Loading them one after the other, the worker would have logged the received file by then."""
    received_line = "install-overlaps/install-overlaps.bin by resumable upload"
    nc = await nats.connect(env.cluster.nats_url)
    seen: list[bool] = []  # per install request of the model: had the worker received the file already?

    async def on_install(msg: Msg) -> None:
        if b'"install-overlaps"' in msg.data:
            seen.append(received_line in env.worker.log())

    sub = await nc.subscribe("nodes.*.backend.install", cb=on_install)
    try:
        async with httpx.AsyncClient(timeout=60) as client:
            response = await client.post(f"{env.a}/v1/chat/completions", json=_chat_body("install-overlaps"))
    finally:
        await sub.unsubscribe()
        await nc.close()
    assert response.status_code == 200
    assert seen == [False]  # one install, sent while the file was still on its way
    assert received_line in env.worker.log()


def test_a_request_past_the_wait_budget_gets_503_with_staging_progress_and_a_later_one_is_served(
    env: Env,
) -> None:
    response = httpx.post(f"{env.c}/v1/chat/completions", json=_chat_body("staged-slowly"), timeout=30)
    assert response.status_code == 503
    assert 5 <= int(response.headers["Retry-After"]) <= 300
    body = response.json()
    assert body["error"]["type"] == "model_loading" and body["error"]["code"] == "model_loading"
    loading = body["loading"]
    assert loading["model"] == "staged-slowly" and loading["state"] in ("installing", "staging")
    assert body["error"]["message"].startswith("model staged-slowly is ")
    deadline = time.monotonic() + 60
    seen_staging = loading["state"] == "staging"
    while time.monotonic() < deadline:
        status = httpx.get(f"{env.a}/api/models/staged-slowly/load-status")
        if status.status_code == 404:
            break
        if status.json()["state"] == "staging" and status.json()["bytes_sent"] > 0:
            seen_staging = True
            assert status.json()["node"] == "w1" and status.json()["total_bytes"] == 12 * MIB
        time.sleep(0.3)
    assert seen_staging
    assert (
        status.status_code == 404
        and status.json()["error"]["message"] == "no load is running for model staged-slowly"
    )
    assert (
        httpx.post(f"{env.c}/v1/chat/completions", json=_chat_body("staged-slowly"), timeout=30).status_code
        == 200
    )


async def test_a_failed_load_gives_every_waiter_on_both_frontends_the_backends_message(env: Env) -> None:
    async with httpx.AsyncClient(timeout=60) as client:
        responses = await asyncio.gather(
            *(
                client.post(f"{(env.a, env.b)[i % 2]}/v1/chat/completions", json=_chat_body("broken"))
                for i in range(10)
            )
        )
    assert {r.status_code for r in responses} == {502}
    for response in responses:
        assert "simulated CUDA out of memory while loading" in response.json()["error"]["message"]
    assert _load_model_calls(env, "broken") == 1
    status = httpx.get(f"{env.a}/api/models/broken/load-status").json()  # the failure stays visible briefly
    assert status["state"] == "failed"


async def _loaded(env: Env, model: str, timeout_s: float = 30) -> bool:
    conn = await asyncpg.connect(env.cluster.database_url)
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if await conn.fetchval(
                "SELECT count(*) FROM node_models WHERE model_name = $1 AND state = 'loaded'", model
            ):
                return True
            await asyncio.sleep(0.2)
        return False
    finally:
        await conn.close()


async def test_a_client_that_disconnects_mid_load_does_not_cancel_the_load(env: Env) -> None:
    with pytest.raises(httpx.TimeoutException):
        httpx.post(f"{env.a}/v1/chat/completions", json=_chat_body("slow-dc"), timeout=0.5)
    assert await _loaded(env, "slow-dc")


async def test_a_killed_frontends_job_is_reclaimed_by_another_frontend(env: Env) -> None:
    doomed, url_d = env.cluster.spawn_frontend("frontend-d", "--load-orphan-window", WINDOW)
    try:
        with pytest.raises(httpx.TimeoutException):
            httpx.post(f"{url_d}/v1/chat/completions", json=_chat_body("orphaned"), timeout=1.0)
        doomed.popen.send_signal(signal.SIGKILL)
        doomed.popen.wait(10)
        response = httpx.post(f"{env.a}/v1/chat/completions", json=_chat_body("orphaned"), timeout=60)
        assert response.status_code == 200, response.text
    finally:
        doomed.stop()
    assert env.cluster.frontend is not None
    assert "loading orphaned on node w1" in env.cluster.frontend.log()  # frontend A ran the reclaimed job


def test_a_worker_stopped_mid_staging_releases_the_load_within_the_stall_window(env: Env) -> None:
    import threading

    result: dict[str, httpx.Response] = {}
    request = threading.Thread(
        target=lambda: result.setdefault(
            "r", httpx.post(f"{env.a}/v1/chat/completions", json=_chat_body("stalled"), timeout=90)
        )
    )
    request.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = httpx.get(f"{env.b}/api/models/stalled/load-status")
        if (
            status.status_code == 200
            and status.json()["state"] == "staging"
            and status.json()["bytes_sent"] > 0
        ):
            break
        time.sleep(0.1)
    os.kill(env.worker.popen.pid, signal.SIGSTOP)
    try:
        request.join(60)
    finally:
        os.kill(env.worker.popen.pid, signal.SIGCONT)
    response = result["r"]
    assert response.status_code == 502
    message = response.json()["error"]["message"]
    assert "staging made no progress for 3s" in message and "CORRAL_LOAD_STALL_WINDOW" in message


async def test_a_load_past_its_deadline_names_budget_and_knob_and_its_backend_is_stopped(env: Env) -> None:
    write_sim_model(env.cluster.models_dir, "too-slow", "load_time_s:6")
    strict, url_e = env.cluster.spawn_frontend("frontend-e", "--model-load-timeout", "1s")
    try:
        response = httpx.post(f"{url_e}/v1/chat/completions", json=_chat_body("too-slow"), timeout=60)
    finally:
        strict.stop()
    assert response.status_code == 502, response.text
    message = response.json()["error"]["message"]
    assert "did not finish within 1s" in message and "set by LOCALAI_NATS_MODEL_LOAD_TIMEOUT" in message
    nc = await nats.connect(env.cluster.nats_url)
    try:
        conn = await asyncpg.connect(env.cluster.database_url)
        node_id = await conn.fetchval("SELECT id FROM backend_nodes WHERE name = 'w1'")
        await conn.close()
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            running = (await nc.request(f"nodes.{node_id}.models.running", b"{}", timeout=5)).data
            if b"too-slow" not in running:
                break
            await asyncio.sleep(0.2)
        assert b"too-slow" not in running  # the abandoned backend process was stopped
    finally:
        await nc.close()
