"""The hot path (frontend/hot_path.py) on real processes: a frontend, two workers, simulator backends.

A warm chat request is answered from the HTTP server's and the lane's callbacks, with the answer the task path
gives; what cannot be answered that way keeps its one path and its answers: a first try that fails is retried on
the other replica, a call past its budget is a 504 naming the knob, a client that leaves stops the generation,
and requests outside the warm case are served as before. `corral_hot_path_requests_total{outcome}` says which
path each request took.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from corral.backends.simulator import FAULT_DIR_ENV
from support.cluster import Cluster
from support.faults import replicas
from support.processes import backend_pid
from support.waiting import wait_for

pytestmark = pytest.mark.slow

CALL = "2s"  # CORRAL_BACKEND_CALL_TIMEOUT of the frontend under test
PAIR = "pair"  # two replicas, least loaded first
SLOW = "slow"  # one token a second: past the call budget at 4 tokens


@dataclass
class Env:
    cluster: Cluster
    faults: Path

    @property
    def url(self) -> str:
        return self.cluster.frontend_url

    def hot(self, outcome: str) -> float:
        text = httpx.get(f"{self.url}/metrics", timeout=30).text
        line = f'corral_hot_path_requests_total{{outcome="{outcome}"}} '
        return next(float(row.rsplit(" ", 1)[1]) for row in text.splitlines() if row.startswith(line))

    def chat(self, model: str = PAIR, *, timeout: float = 60, **fields: Any) -> httpx.Response:
        return httpx.post(f"{self.url}/v1/chat/completions", json=_body(model, **fields), timeout=timeout)


def _body(model: str, **fields: Any) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": 3,
        **fields,
    }


@pytest.fixture(scope="module")
def env(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Env]:
    c = Cluster(root=state_root / "e2e-hot-path", database_url=make_database(), nats_url=nats_url)
    faults = c.root / "faults"
    faults.mkdir(parents=True, exist_ok=True)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    c.worker_env = {FAULT_DIR_ENV: str(faults)}  # the workers pass it on to their backends
    (c.models_dir / f"{PAIR}.yaml").write_text(
        f"name: {PAIR}\nbackend: simulator\nparameters:\n  model: sim\n"
    )
    (c.models_dir / f"{SLOW}.yaml").write_text(
        f"name: {SLOW}\nbackend: simulator\nparameters:\n  model: sim\noptions:\n  - output_token_time_s:1\n"
    )
    c.frontend_env = {
        "LOCALAI_MODEL_SCHEDULING": json.dumps(
            [{"model_name": PAIR, "min_replicas": 2, "route_policy": "least_loaded"}]
        )
    }
    try:
        c.start_frontend(
            "--expose-node-header",
            "--backend-call-timeout",
            CALL,
            "--backend-probe-timeout",
            "1s",
            "--breaker-cooldown",  # a breaker the sick replica opens heals within the test
            "1s",
            "--breaker-cooldown-max",
            "2s",
        )
        c.start_worker("w1")
        c.start_worker("w2")
        e = Env(c, faults)
        wait_for(lambda: len(replicas(c.database_url, PAIR)) == 2, f"two replicas of {PAIR}", 90)
        _until_answered_hot(e, PAIR)
        _until_answered_hot(e, SLOW)
        yield e
    finally:
        c.stop()


def _until_answered_hot(env: Env, model: str) -> None:
    """Requests until one is answered from callbacks: the model warm, its replicas' lanes found."""

    def answered_hot() -> bool:
        before = env.hot("answered")
        for _ in range(4):  # least loaded: both replicas, so both lanes
            assert env.chat(model, max_tokens=1).status_code == 200
        return env.hot("answered") >= before + 4

    wait_for(answered_hot, f"warm {model} requests answered on the hot path", 60)


def _comparable(r: httpx.Response) -> tuple[int, dict[str, Any], dict[str, str]]:
    body = r.json()
    assert body["id"].startswith("chatcmpl-") and isinstance(body["created"], int)
    del body["id"], body["created"]
    headers = {
        k: v
        for k, v in r.headers.items()
        if k not in ("date", "content-length", "x-corral-replica", "x-localai-node")
    }
    return r.status_code, body, headers


def test_a_warm_chat_request_is_answered_from_callbacks_with_the_task_paths_answer(env: Env) -> None:
    before = env.hot("answered")
    hot = [env.chat() for _ in range(6)]
    served = {r.headers["x-corral-replica"] for r in hot}
    while len(served) < 2 and len(hot) < 40:  # least loaded breaks ties at random: until both have served
        hot.append(env.chat())
        served.add(hot[-1].headers["x-corral-replica"])
    assert env.hot("answered") == before + len(hot)
    declined = env.hot("declined")
    # the priority header takes the access layer's full path, then the handler's task: the reference answer
    task = httpx.post(
        f"{env.url}/v1/chat/completions",
        json=_body(PAIR),
        headers={"x-corral-priority": "normal"},
        timeout=60,
    )
    assert env.hot("declined") == declined and env.hot("answered") == before + len(hot)  # not offered at all
    assert task.status_code == 200, task.text
    for r in hot:
        assert _comparable(r) == _comparable(task)
        assert r.headers["x-corral-replica"].startswith(f"{PAIR}#")
    answer = hot[0].json()
    assert answer["object"] == "chat.completion" and answer["model"] == PAIR
    assert (
        answer["choices"][0]["message"]["role"] == "assistant" and answer["choices"][0]["message"]["content"]
    )
    assert answer["usage"]["completion_tokens"] == 3 and answer["choices"][0]["finish_reason"] == "length"
    assert len({r.json()["id"] for r in hot}) == len(hot)
    assert served == {  # least loaded: both replicas served
        f"{PAIR}#{row['replica_index']}@{row['address']}" for row in replicas(env.cluster.database_url, PAIR)
    }


def test_a_first_try_that_fails_is_retried_on_the_other_replica(env: Env) -> None:
    rows = replicas(env.cluster.database_url, PAIR)
    sick = str(rows[0]["address"])
    pid = backend_pid(sick.rpartition(":")[2], env.cluster.workers)
    assert pid is not None
    fault = env.faults / str(pid)
    fault.write_text("UNAVAILABLE")
    try:
        continued = env.hot("continued")
        answers: list[httpx.Response] = []
        # least loaded breaks ties at random: requests until one's first try met the sick replica
        while env.hot("continued") == continued and len(answers) < 40:
            answers.append(env.chat())
        assert all(r.status_code == 200 for r in answers), [r.text for r in answers]
        assert all(not r.headers["x-corral-replica"].endswith("@" + sick) for r in answers)
        assert env.hot("continued") > continued  # a first try on the sick replica, retried in a task
        answered = env.hot("answered")  # a breaker it opened keeps other models on the hot path
        assert env.chat(SLOW, max_tokens=1).status_code == 200
        assert env.hot("answered") == answered + 1
    finally:
        fault.unlink()
    _until_answered_hot(env, PAIR)  # healed: the breaker's trial passed


def test_a_call_past_its_budget_is_a_504_naming_the_knob(env: Env) -> None:
    _until_answered_hot(env, SLOW)  # warm, its lane found (one token a request: within the budget)
    continued = env.hot("continued")
    r = env.chat(SLOW, max_tokens=4)  # 4 s of tokens, a 2 s budget
    assert r.status_code == 504, r.text
    assert (
        r.json()["error"]["message"].startswith(f"model {SLOW} on node w")
        and f"no answer within {CALL} (raise CORRAL_BACKEND_CALL_TIMEOUT)" in r.json()["error"]["message"]
    )
    assert env.hot("continued") == continued + 1


def test_a_client_that_leaves_stops_the_generation(env: Env) -> None:
    _until_answered_hot(env, SLOW)
    left = env.hot("left")
    logs = "".join(w.log() for w in env.cluster.workers)
    cancelled = logs.count("Predict cancelled by the caller")
    with pytest.raises(httpx.ReadTimeout):
        env.chat(SLOW, max_tokens=4, timeout=0.8)
    wait_for(lambda: env.hot("left") == left + 1, "the hot path to see the client leave", 10)
    wait_for(
        lambda: (
            "".join(w.log() for w in env.cluster.workers).count("Predict cancelled by the caller") > cancelled
        ),
        "the backend to log the cancelled Predict",
        10,
    )
    assert env.chat(SLOW, max_tokens=1).status_code == 200  # its slot was given back


def test_requests_outside_the_warm_case_are_declined_and_answered_as_before(env: Env) -> None:
    declined = env.hot("declined")
    streamed = env.chat(stream=True)
    assert streamed.status_code == 200 and streamed.text.rstrip().endswith("data: [DONE]")
    unknown = env.chat("no-such-model")
    assert unknown.status_code == 404 and "no-such-model" in unknown.json()["error"]["message"]
    bad = env.chat(temperature=9)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "temperature"
    several = env.chat(n=2)
    assert several.status_code == 200 and len(several.json()["choices"]) == 2
    assert env.hot("declined") == declined + 4
