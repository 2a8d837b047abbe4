"""No hang on the request path, on real processes: a frontend, a worker and simulator backends.

Budgets, a stopped backend (SIGSTOP), a slow but alive one, client disconnects cancelling the
backend's generation, a stream counted in flight from the pick (prefill included), and the
backend listening on the worker's serve host only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import nats
import pytest
from nats.aio.msg import Msg

from support.cluster import Cluster, free_port_pair, spawn, wait_http
from support.processes import backend_pid
from support.waiting import wait_for

pytestmark = pytest.mark.slow

IDLE = "2s"  # CORRAL_STREAM_IDLE_TIMEOUT of the frontend under test
FIRST_TOKEN = "5s"  # CORRAL_STREAM_FIRST_TOKEN_TIMEOUT
CALL = "3s"  # CORRAL_BACKEND_CALL_TIMEOUT
# Budgets start once a replica is picked: a cold load is bounded by LOCALAI_MODEL_LOAD_WAIT, not by these.
SERVE_HOST = "127.0.0.3"  # the worker's --serve-addr host: backends must listen there, not on 0.0.0.0


def _sim(models_dir: Path, name: str, *options: str) -> None:
    opts = "".join(f'\n  - "{o}"' for o in options) or " []"
    (models_dir / f"{name}.yaml").write_text(
        f"name: {name}\nbackend: simulator\nparameters:\n  model: {name}\noptions:{opts}\n"
    )


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = Cluster(root=state_root / "e2e-no-hang", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    _sim(c.models_dir, "steady", "output_token_time_s:0.05")  # 20 tokens/s: SIGSTOPped mid-stream
    _sim(c.models_dir, "slow", "output_token_time_s:3")  # alive, but slower than the idle budget
    _sim(c.models_dir, "prefill", "prompt_token_time_s:2")  # 2 s per prompt word before the first token
    _sim(c.models_dir, "paced", "output_token_time_s:0.2")  # disconnect tests
    _sim(c.models_dir, "thinking", "prompt_token_time_s:1")  # in flight during its prefill
    try:
        c.start_frontend(
            "--stream-idle-timeout",
            IDLE,
            "--stream-first-token-timeout",
            FIRST_TOKEN,
            "--backend-call-timeout",
            CALL,
            "--backend-probe-timeout",
            "1s",
        )
        base = free_port_pair()
        argv = [
            *c.worker_argv("w1", base),
            "--serve-addr",
            f"{SERVE_HOST}:{base}",
            "--advertise-addr",
            f"{SERVE_HOST}:{base}",
            "--advertise-http-addr",
            f"127.0.0.1:{base - 1}",
        ]
        worker = spawn("w1", argv, c.root / "logs")
        wait_http(f"http://127.0.0.1:{base - 1}/readyz", worker)
        c.workers.append(worker)
        c.worker_ports.append(base)
        yield c
    finally:
        c.stop()


def _chat(model: str, content: str = "hello", max_tokens: int = 8, stream: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
    }
    if stream:
        body["stream"] = True
    return body


async def _replica(cluster: Cluster, model: str) -> asyncpg.Record | None:
    conn = await asyncpg.connect(cluster.database_url)
    try:
        return await conn.fetchrow("SELECT address, state FROM node_models WHERE model_name = $1", model)
    finally:
        await conn.close()


def _warm(cluster: Cluster, model: str) -> int:
    """Load `model` (one short request) and return its backend's pid."""
    reply = httpx.post(
        f"{cluster.frontend_url}/v1/chat/completions", json=_chat(model, max_tokens=1), timeout=60
    )
    assert reply.status_code == 200, reply.text
    row = asyncio.run(_replica(cluster, model))
    assert row is not None
    pid = backend_pid(row["address"].rpartition(":")[2], cluster.workers)
    assert pid is not None
    return pid


def _events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line[len("data: ") :])


def _worker_log(cluster: Cluster) -> str:
    return cluster.workers[0].log()


def test_a_stopped_backend_ends_the_stream_with_an_error_naming_the_idle_knob_and_is_dropped(
    cluster: Cluster,
) -> None:
    pid = _warm(cluster, "steady")
    try:
        with httpx.stream(
            "POST",
            f"{cluster.frontend_url}/v1/chat/completions",
            json=_chat("steady", max_tokens=400, stream=True),
            timeout=60,
        ) as response:
            assert response.status_code == 200
            events = _events(response.iter_lines())
            for event in events:
                if event.get("choices") and event["choices"][0]["delta"].get("content"):
                    break  # tokens flow: stop the backend mid-stream
            os.kill(pid, signal.SIGSTOP)
            errors = [e["error"] for e in events if "error" in e]
        assert errors == [
            {
                "message": f"model steady on node w1: the stream sent nothing within {IDLE} (raise "
                "CORRAL_STREAM_IDLE_TIMEOUT); the replica did not answer a health probe and was dropped",
                "type": "server_error",
                "code": "backend_timeout",
            }
        ]
        assert asyncio.run(_replica(cluster, "steady")) is None  # forgotten: row deleted
        # The model recovers: the next request loads it again, on a fresh process (the frozen one is replaced).
        reply = httpx.post(
            f"{cluster.frontend_url}/v1/chat/completions", json=_chat("steady", max_tokens=2), timeout=60
        )
        assert reply.status_code == 200, reply.text
        row = asyncio.run(_replica(cluster, "steady"))
        assert row is not None and backend_pid(row["address"].rpartition(":")[2], cluster.workers) != pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def test_a_slow_but_alive_backend_times_out_the_stream_and_is_kept(cluster: Cluster) -> None:
    with httpx.stream(
        "POST",
        f"{cluster.frontend_url}/v1/chat/completions",
        json=_chat("slow", max_tokens=3, stream=True),
        timeout=60,
    ) as response:
        assert response.status_code == 200
        errors = [e["error"] for e in _events(response.iter_lines()) if "error" in e]
    assert errors == [
        {
            "message": f"model slow on node w1: the stream sent nothing within {IDLE} (raise "
            "CORRAL_STREAM_IDLE_TIMEOUT); the replica answered a health probe and is kept",
            "type": "server_error",
            "code": "backend_timeout",
        }
    ]
    row = asyncio.run(_replica(cluster, "slow"))
    assert row is not None and row["state"] == "loaded"


def test_a_unary_call_past_its_deadline_is_504_naming_the_knob_and_the_replica_is_kept(
    cluster: Cluster,
) -> None:
    reply = httpx.post(
        f"{cluster.frontend_url}/v1/chat/completions", json=_chat("slow", max_tokens=4), timeout=60
    )  # 4 tokens take 12 s (the load, if any, is not part of the call's budget)
    assert reply.status_code == 504
    assert reply.json()["error"] == {
        "message": f"model slow on node w1: no answer within {CALL} (raise CORRAL_BACKEND_CALL_TIMEOUT); "
        "the replica answered a health probe and is kept",
        "type": "server_error",
        "code": "backend_timeout",
    }
    assert asyncio.run(_replica(cluster, "slow")) is not None


def test_a_stream_without_a_first_token_in_its_budget_is_504_naming_the_first_token_knob(
    cluster: Cluster,
) -> None:
    body = _chat("prefill", content="four words of prompt", max_tokens=2, stream=True)  # 8 s of prefill
    reply = httpx.post(f"{cluster.frontend_url}/v1/chat/completions", json=body, timeout=60)
    assert reply.status_code == 504
    assert reply.json()["error"]["message"] == (
        f"model prefill on node w1: no first token within {FIRST_TOKEN} (raise CORRAL_STREAM_FIRST_TOKEN_TIMEOUT); "
        "the replica answered a health probe and is kept"
    )


def test_a_client_that_disconnects_from_a_unary_request_cancels_the_generation(cluster: Cluster) -> None:
    _warm(cluster, "paced")
    before = _worker_log(cluster).count("Predict cancelled by the caller")
    with pytest.raises(httpx.ReadTimeout):  # 10 tokens take 2 s: the client leaves after 0.6 s
        httpx.post(
            f"{cluster.frontend_url}/v1/chat/completions", json=_chat("paced", max_tokens=10), timeout=0.6
        )
    wait_for(
        lambda: _worker_log(cluster).count("Predict cancelled by the caller") > before,
        "the backend to log the cancelled Predict",
        10,
    )


def test_a_client_that_leaves_a_stream_cancels_the_generation_on_the_backend(cluster: Cluster) -> None:
    _warm(cluster, "paced")
    before = _worker_log(cluster).count("PredictStream cancelled by the caller")
    with httpx.stream(
        "POST",
        f"{cluster.frontend_url}/v1/chat/completions",
        json=_chat("paced", max_tokens=200, stream=True),
        timeout=30,
    ) as response:
        for event in _events(response.iter_lines()):
            if event.get("choices") and event["choices"][0]["delta"].get("content"):
                break  # leave after the first token; 199 remain (40 s)
    wait_for(
        lambda: _worker_log(cluster).count("PredictStream cancelled by the caller after") > before,
        "the backend to log the cancelled PredictStream",
        10,
    )


def test_a_stream_counts_in_flight_from_the_pick_while_its_prompt_is_processed(
    cluster: Cluster, nats_url: str
) -> None:
    _warm(cluster, "thinking")
    first_token = threading.Event()
    seen_in_prefill: list[int] = []

    async def watch(stop: threading.Event) -> None:
        nc = await nats.connect(nats_url)

        async def on_report(msg: Msg) -> None:
            counts = json.loads(msg.data)["counts"]
            busy = sum(n for key, n in counts.items() if key.endswith("/thinking#0"))
            if busy and not first_token.is_set():
                seen_in_prefill.append(busy)

        await nc.subscribe("corral.inflight", cb=on_report)
        while not stop.is_set():
            await asyncio.sleep(0.05)
        await nc.close()

    stop = threading.Event()
    watcher = threading.Thread(target=lambda: asyncio.run(watch(stop)))
    watcher.start()
    try:
        body = _chat("thinking", content="two words", max_tokens=2, stream=True)  # 2 s of prefill
        with httpx.stream(
            "POST", f"{cluster.frontend_url}/v1/chat/completions", json=body, timeout=60
        ) as response:
            for event in _events(response.iter_lines()):
                if event.get("choices") and event["choices"][0]["delta"].get("content"):
                    first_token.set()
    finally:
        stop.set()
        watcher.join()
    assert first_token.is_set()
    assert seen_in_prefill and set(seen_in_prefill) == {1}


def _listening(port: int) -> set[str]:
    """Local addresses (hex, as in /proc/net/tcp) with a socket listening on `port`."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                host, _, hex_port = fields[1].partition(":")
                if int(hex_port, 16) == port and fields[3] == "0A":  # 0A = LISTEN
                    found.add(host.removeprefix("0000000000000000FFFF0000"))  # IPv4-mapped IPv6 → IPv4
    return found


def test_backends_listen_on_the_worker_serve_host_only(cluster: Cluster) -> None:
    _warm(cluster, "paced")
    row = asyncio.run(_replica(cluster, "paced"))
    assert row is not None
    host, _, port = row["address"].rpartition(":")
    assert host == SERVE_HOST
    assert _listening(int(port)) == {
        "0300007F"
    }  # 127.0.0.3 (hex, little-endian); a wildcard bind is all zeros
