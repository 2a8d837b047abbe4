"""Prefix-cache-aware routing on real parts (two frontends, two workers, simulator backends, PostgreSQL,
NATS): the second turn of a conversation reaches the replica of the first even through the other
frontend, and the explain endpoint says which picker chose it and why."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.cluster import Cluster
from support.waiting import wait_for

pytestmark = pytest.mark.slow

FAST = ["--reconciler-interval", "0.3s", "--expose-node-header"]


@dataclass
class Env:
    cluster: Cluster
    a: str
    b: str


@pytest.fixture(scope="module")
def env(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Env]:
    c = Cluster(root=state_root / "e2e-prefix-routing", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    (c.models_dir / "chat.yaml").write_text(
        'name: chat\nbackend: simulator\nparameters:\n  model: chat\noptions:\n  - "kv_cache_tokens:100000"\n'
    )
    c.frontend_env = {
        "CORRAL_REPLICA_SLOTS": "8",  # concurrent requests reach the replicas: the pickers, not the queue, decide
        "LOCALAI_MODEL_SCHEDULING": json.dumps(
            [{"model_name": "chat", "min_replicas": 2, "route_policy": "prefix_cache"}]
        ),
    }
    second = None
    try:
        c.start_frontend(*FAST)
        second, b = c.spawn_frontend("frontend-2", *FAST)
        c.start_worker("w1")
        c.start_worker("w2")
        for url in (c.frontend_url, b):
            wait_for(
                functools.partial(_routable_twice, c, url),
                f"two replicas of chat routable at {url}",
                60,
            )
        yield Env(c, c.frontend_url, b)
    finally:
        if second is not None:
            second.stop()
        c.stop()


def _routable_twice(c: Cluster, url: str) -> bool:
    return len(_explain(c, url)["routing"]["replicas"]) == 2


def _explain(c: Cluster, url: str) -> dict[str, Any]:
    r = httpx.get(
        f"{url}/api/nodes/scheduling/explain", params={"model": "chat"}, headers=c.admin_headers, timeout=30
    )
    assert r.status_code == 200, r.text
    explained: dict[str, Any] = r.json()
    return explained


def _turn(url: str, messages: list[dict[str, str]]) -> tuple[str, str]:
    r = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": "chat", "messages": messages, "max_tokens": 4},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    return r.headers["X-Corral-Replica"], r.json()["choices"][0]["message"]["content"]


def test_the_second_turn_reaches_the_first_turns_replica_through_the_other_frontend(env: Env) -> None:
    firsts: list[str] = []
    seconds: list[str] = []
    n = 0
    # 8 conversations at least; a first turn holds no prefix yet and goes to a random one of the equally loaded
    # replicas (all 8 on one by chance once in 2^7 runs), so more until both replicas have been first
    while n < 8 or (len(set(firsts)) < 2 and n < 24):
        system = f"conversation {n}: " + "you are a careful assistant who answers briefly. " * 20  # ~1 KB
        messages = [{"role": "system", "content": system}, {"role": "user", "content": f"question {n}"}]
        replica, answer = _turn(env.a, messages)
        firsts.append(replica)
        messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": "and then?"}]
        seconds.append(_turn(env.b, messages)[0])
        n += 1
    assert seconds == firsts
    assert len(set(firsts)) == 2  # the conversations spread over both replicas
    last = _explain(env.cluster, env.b)["routing"]["last_decision"]
    assert last["picker"] == "prefix_cache"
    assert last["reason"].startswith(f"holds {last['match_blocks']} of {last['chain_blocks']} prompt blocks")
    assert last["match_blocks"] >= 3  # the ~1 KB system prompt: 256-character blocks
    assert set(last["loads"]) == {r["replica"] for r in _explain(env.cluster, env.b)["routing"]["replicas"]}


def test_least_loaded_ignores_the_prefix(env: Env) -> None:
    """Control: with route_policy least_loaded the same workload is not pinned (the picker is per model)."""
    r = httpx.post(
        f"{env.a}/api/nodes/scheduling",
        headers=env.cluster.admin_headers,
        timeout=30,
        json={"model_name": "chat", "min_replicas": 2, "route_policy": "least_loaded"},
    )
    assert r.status_code == 200, r.text
    messages = [
        {"role": "system", "content": "a fixed system prompt that is long enough. " * 30},
        {"role": "user", "content": "same question"},
    ]
    # idle replicas are equally loaded, and least_loaded takes a random one of them (anti-herding): of 12 turns,
    # all on one replica by chance once in 2^11 runs (4 turns failed one run in 8)
    replicas = {_turn(env.a, messages)[0] for _ in range(12)}
    assert len(replicas) == 2
    assert _explain(env.cluster, env.a)["routing"]["last_decision"]["picker"] == "least_loaded"
