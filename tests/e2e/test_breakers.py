"""Circuit breakers and retries on real parts (issue 25 item 3): a frontend, two workers with one simulator replica
each. A replica made sick (the simulator's fault files: its calls answer UNAVAILABLE while it still answers Health)
opens its breaker after three failures while every request is retried on the other replica before its first
byte; once healthy, its breaker closes after the cooldown. With both sick, requests get 503 naming the cooldown.
A stream whose backend dies after its first byte is never retried: the client gets the error event."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from corral.backends.simulator import FAULT_DIR_ENV
from support.cluster import Cluster
from support.fault_clients import StreamResult, stream_chat
from support.faults import replicas
from support.processes import backend_pid
from support.waiting import wait_for

pytestmark = pytest.mark.slow

MODEL = "sick"
FRONTEND = [
    "--reconciler-interval",
    "0.3s",
    "--expose-node-header",
    "--breaker-failures",
    "3",
    "--breaker-cooldown",
    "1s",
    "--breaker-cooldown-max",
    "2s",
]


@dataclass
class Env:
    cluster: Cluster
    faults: Path

    def explain(self) -> dict[str, Any]:
        r = httpx.get(
            f"{self.cluster.frontend_url}/api/nodes/scheduling/explain",
            params={"model": MODEL},
            headers=self.cluster.admin_headers,
            timeout=30,
        )
        assert r.status_code == 200, r.text
        routing: dict[str, Any] = r.json()["routing"]
        return routing

    def breakers(self) -> dict[str, dict[str, Any]]:
        """Each replica's breaker on the frontend, by the node it is on."""
        return {r["node"]: r["breaker"] for r in self.explain()["replicas"]}

    def pids(self) -> dict[str, int]:
        """The backend process of each replica, by the address it serves on."""
        found: dict[str, int] = {}
        for row in replicas(self.cluster.database_url, MODEL):
            address = str(row["address"])
            pid = backend_pid(address.rpartition(":")[2], self.cluster.workers)
            assert pid is not None, f"no backend process for {row}"
            found[address] = pid
        assert len(found) == 2, found
        return found

    def sicken(self, pid: int) -> Path:
        fault = self.faults / str(pid)
        fault.write_text("UNAVAILABLE")
        return fault


@pytest.fixture(scope="module")
def env(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Env]:
    c = Cluster(root=state_root / "e2e-breakers", database_url=make_database(), nats_url=nats_url)
    faults = c.root / "faults"
    faults.mkdir(parents=True, exist_ok=True)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    c.worker_env = {FAULT_DIR_ENV: str(faults)}  # the workers pass it on to their backends
    (c.models_dir / f"{MODEL}.yaml").write_text(
        f"name: {MODEL}\nbackend: simulator\nparameters:\n  model: sim\noptions:\n"
        '  - "output_token_time_s:0.05"\n'
    )
    c.frontend_env = {
        "LOCALAI_MODEL_SCHEDULING": json.dumps(
            [{"model_name": MODEL, "min_replicas": 2, "route_policy": "least_loaded"}]
        )
    }
    try:
        c.start_frontend(*FRONTEND)
        c.start_worker("w1")
        c.start_worker("w2")
        e = Env(c, faults)
        wait_for(lambda: len(e.explain()["replicas"]) == 2, f"two replicas of {MODEL} routable", 90)
        yield e
    finally:
        c.stop()


def chat(env: Env, stream: bool = False, max_tokens: int = 2) -> httpx.Response:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    return httpx.post(f"{env.cluster.frontend_url}/v1/chat/completions", json=body, timeout=60)


def metric(env: Env, name: str, **labels: str) -> float:
    text = httpx.get(f"{env.cluster.frontend_url}/metrics", timeout=30).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def served_by(r: httpx.Response) -> str:
    """The address of the replica that answered (`X-Corral-Replica: model#index@address`)."""
    return r.headers["x-corral-replica"].rpartition("@")[2]


def served(env: Env, n: int) -> list[httpx.Response]:
    """`n` requests, every other one streamed; each must be answered in full, with no error."""
    answers = []
    for i in range(n):
        r = chat(env, stream=i % 2 == 1)
        assert r.status_code == 200, r.text
        if i % 2:
            assert r.text.rstrip().endswith("data: [DONE]") and '"error"' not in r.text, r.text
        answers.append(r)
    return answers


def test_a_sick_replica_opens_its_breaker_while_the_other_serves_every_request_then_closes(env: Env) -> None:
    pids = env.pids()
    sick_address, healthy_address = sorted(pids)
    opened = metric(env, "corral_breaker_transitions_total", model=MODEL, to="open")
    retried = metric(env, "corral_backend_retries_total", model=MODEL, reason="unavailable")
    fault = env.sicken(pids[sick_address])
    try:

        def breaker_opened() -> bool:
            served(env, 2)  # the sick replica's failures are retried on the other one: every answer is 200
            return metric(env, "corral_breaker_transitions_total", model=MODEL, to="open") > opened

        wait_for(breaker_opened, f"the breaker of {sick_address} to open", 60)
        states = {b["state"] for b in env.breakers().values()}
        assert states & {"open", "half_open"}, env.breakers()
        sick = next(b for b in env.breakers().values() if b["state"] != "closed")
        assert "simulated fault" in sick["last_failure"]
        assert metric(env, "corral_backend_retries_total", model=MODEL, reason="unavailable") >= retried + 3
        for r in served(
            env, 4
        ):  # only the healthy replica answers (a trial let through to the sick one fails)
            assert served_by(r) == healthy_address
    finally:
        fault.unlink()

    def closed() -> bool:
        served(env, 1)  # after the 1 s cooldown, one of these is the trial that closes it
        return all(b["state"] == "closed" for b in env.breakers().values())

    wait_for(closed, f"the breaker of {sick_address} to close once it is healthy", 60)
    assert metric(env, "corral_breaker_transitions_total", model=MODEL, to="closed") >= 1
    seen: set[str] = set()

    def both_serve() -> bool:
        seen.add(served_by(chat(env)))
        return seen == set(pids)

    wait_for(both_serve, "both replicas serving again", 30)


def test_with_every_replica_sick_a_request_gets_503_naming_the_cooldown_setting(env: Env) -> None:
    faults = [env.sicken(pid) for pid in env.pids().values()]
    refused: list[httpx.Response] = []
    try:

        def unavailable() -> bool:
            r = chat(env)
            assert r.status_code in (502, 503), r.text  # failures are answered, never hang or 500
            if r.status_code == 503:
                refused.append(r)
            return bool(refused)

        wait_for(unavailable, "a request refused with every breaker open", 60)
    finally:
        for fault in faults:
            fault.unlink()
    error = refused[0].json()["error"]
    assert error["code"] == "replicas_unavailable", error
    assert "CORRAL_BREAKER_COOLDOWN" in error["message"] and "simulated fault" in error["message"]
    assert int(refused[0].headers["retry-after"]) >= 1

    def recovered() -> bool:
        return chat(env).status_code == 200 and all(b["state"] == "closed" for b in env.breakers().values())

    wait_for(recovered, "both breakers closed once the replicas are healthy", 60)


def test_a_replica_refusing_a_kind_of_request_it_cannot_serve_stays_routable(env: Env) -> None:
    """FAILED_PRECONDITION without "not loaded" (no chat template, loaded without embeddings): the client gets a
    400 naming the model, and the replicas are neither dropped nor reloaded nor counted as failing."""
    before = env.pids()
    faults = []
    for pid in before.values():
        fault = env.faults / str(pid)
        fault.write_text("FAILED_PRECONDITION")
        faults.append(fault)
    try:
        for _ in range(4):
            r = chat(env)
            assert r.status_code == 400, r.text
            error = r.json()["error"]
            assert (error["code"], error["param"]) == ("model_not_capable", "model"), error
            assert "simulated fault" in error["message"]
    finally:
        for fault in faults:
            fault.unlink()
    assert chat(env).status_code == 200
    assert env.pids() == before  # the same two backend processes: none was forgotten and loaded again
    assert all(b["state"] == "closed" for b in env.breakers().values()), env.breakers()


def test_a_stream_whose_backend_dies_after_the_first_byte_is_never_retried(env: Env) -> None:
    """Last in the module: it kills a replica's backend (the reconciler loads another)."""
    retries = metric(env, "corral_backend_retries_total", model=MODEL)
    result = StreamResult()
    reader = threading.Thread(
        target=stream_chat, args=(env.cluster.frontend_url, MODEL, 200, result), daemon=True
    )
    reader.start()
    wait_for(lambda: result.pieces >= 3 or not reader.is_alive(), "three streamed chunks", 60)
    assert reader.is_alive(), result.seen()
    # both replicas are idle but for this stream: the one with a request in flight is the one streaming
    streaming = [r["node"] for r in env.explain()["replicas"] if r["in_flight"] == 1]
    assert len(streaming) == 1, env.explain()["replicas"]
    address = next(
        str(r["address"]) for r in replicas(env.cluster.database_url, MODEL) if r["node"] == streaming[0]
    )
    victim = backend_pid(address.rpartition(":")[2], env.cluster.workers)
    assert victim is not None, f"no backend process for {address}"
    os.kill(victim, signal.SIGKILL)
    reader.join(60)
    assert not reader.is_alive(), "the stream stayed open after its backend died"
    assert result.status == 200 and result.pieces >= 3 and result.finish_reason is None, result.seen()
    assert result.error, result.seen()  # the error event reached the client
    assert metric(env, "corral_backend_retries_total", model=MODEL) == retries  # one call only, never retried
