"""Model routes on real parts (two frontends, a worker, simulator backend processes; issue 25 item 4): a 90/10
route splits within a stated bound over 1,000 requests; a fallback serves when the chosen target cannot
(unschedulable, or its load fails) and the answer names it; an edit on one frontend reaches the other;
a bad route is a 400 naming the field."""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.cluster import Cluster, Proc
from support.waiting import wait_for

A, B, SPARE, NOWHERE, BROKEN = "route-a", "route-b", "route-spare", "route-nowhere", "route-broken"
HI = [{"role": "user", "content": "hi"}]
SPLIT_REQUESTS, CONCURRENCY = 1000, 16


@dataclass
class Env:
    cluster: Cluster
    url: str
    url_b: str  # a second frontend on the same PostgreSQL and NATS
    admin: dict[str, str]


def _sim(name: str, extra: str = "") -> str:
    return f"name: {name}\nbackend: simulator\nparameters:\n  model: {name}\n{extra}"


@pytest.fixture(scope="module")
def env(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Env]:
    c = Cluster(root=state_root / "e2e-model-routes", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    for name in (A, B, SPARE):
        (c.models_dir / f"{name}.yaml").write_text(_sim(name))
    (c.models_dir / f"{NOWHERE}.yaml").write_text(_sim(NOWHERE, "node_selector:\n  gpu: none-such\n"))
    (c.models_dir / f"{BROKEN}.yaml").write_text(_sim(BROKEN, "options:\n  - load_fail:canary is broken\n"))
    extra: list[Proc] = []
    try:
        c.start_frontend()
        proc_b, url_b = c.spawn_frontend("frontend-b")
        extra.append(proc_b)
        c.start_worker("w1")
        yield Env(c, c.frontend_url, url_b, c.admin_headers)
    finally:
        c.stop()
        for proc in extra:
            proc.stop()


def _put(env: Env, name: str, body: Any, url: str | None = None) -> httpx.Response:
    return httpx.put(f"{url or env.url}/api/routes/{name}", json=body, headers=env.admin, timeout=30)


def _chat(url: str, model: str, **extra: Any) -> httpx.Response:
    body = {"model": model, "messages": HI, "max_tokens": 2, **extra}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)


def test_a_90_10_route_splits_within_four_sigma_over_1000_requests(env: Env) -> None:
    assert (
        _put(env, "split", {"targets": [{"model": A, "weight": 90}, {"model": B, "weight": 10}]}).status_code
        == 200
    )
    for model in (A, B):  # both loaded first: the split is of warm traffic
        assert _chat(env.url, model).status_code == 200

    async def run() -> Counter[tuple[str, str]]:
        served: Counter[tuple[str, str]] = Counter()
        limits = httpx.Limits(max_connections=CONCURRENCY)
        async with httpx.AsyncClient(base_url=env.url, timeout=120, limits=limits) as client:

            async def worker(count: int) -> None:
                for _ in range(count):
                    r = await client.post(
                        "/v1/completions", json={"model": "split", "prompt": "hi", "max_tokens": 1}
                    )
                    assert r.status_code == 200, r.text
                    assert r.headers["x-corral-route"] == "split"
                    served[(r.headers["x-corral-route-target"], r.json()["model"])] += 1

            await asyncio.gather(
                *(worker(SPLIT_REQUESTS // CONCURRENCY) for _ in range(CONCURRENCY - 1)),
                worker(SPLIT_REQUESTS - (CONCURRENCY - 1) * (SPLIT_REQUESTS // CONCURRENCY)),
            )
        return served

    served = asyncio.run(run())
    assert set(served) <= {(A, A), (B, B)}  # the header and the body's model name the same target
    canary = served[(B, B)]
    sigma = math.sqrt(SPLIT_REQUESTS * 0.1 * 0.9)  # Binomial(1000, 0.1): 9.5 requests
    assert abs(canary - 100) <= 4 * sigma, served  # ±38 requests, ±3.8 points: fails once in ~16,000 runs


@pytest.mark.parametrize(
    "first, stream",
    [
        (NOWHERE, False),  # its node_selector matches no node: unschedulable
        (NOWHERE, True),
        (BROKEN, False),  # its load fails (LoadModel refuses), before any byte
    ],
)
def test_a_fallback_serves_when_the_chosen_target_cannot_and_the_answer_names_it(
    env: Env, first: str, stream: bool
) -> None:
    name = f"fallback-{first}"
    assert _put(env, name, {"targets": [first], "fallbacks": [SPARE]}).status_code == 200
    r = _chat(env.url, name, stream=stream)
    assert r.status_code == 200, r.text
    assert r.headers["x-corral-route"] == name
    assert r.headers["x-corral-route-target"] == SPARE
    if stream:
        assert f'"model":"{SPARE}"' in r.text.replace(" ", "")
    else:
        assert r.json()["model"] == SPARE


def test_a_route_whose_every_target_fails_names_each_attempt(env: Env) -> None:
    assert _put(env, "dead-end", {"targets": [NOWHERE], "fallbacks": [BROKEN]}).status_code == 200
    r = _chat(env.url, "dead-end")
    assert r.status_code >= 500
    body = r.json()
    assert body["route"] == "dead-end"
    assert [a["model"] for a in body["attempts"]] == [NOWHERE, BROKEN]
    assert "route 'dead-end': no target could serve the request" in body["error"]["message"]


def test_a_route_edit_on_one_frontend_takes_effect_on_the_other(env: Env) -> None:
    assert _put(env, "moving", {"targets": [A]}).status_code == 200

    def target() -> str:
        return str(_chat(env.url_b, "moving").headers.get("x-corral-route-target", ""))

    wait_for(lambda: target() == A, "frontend b serves route 'moving' by route-a", 30)
    assert _put(env, "moving", {"targets": [B]}).status_code == 200
    wait_for(lambda: target() == B, "frontend b follows the edit to route-b", 30)
    assert httpx.delete(f"{env.url}/api/routes/moving", headers=env.admin, timeout=30).status_code == 204
    wait_for(
        lambda: _chat(env.url_b, "moving").status_code == 404, "frontend b forgets the deleted route", 30
    )


def test_routes_are_listed_with_each_target_share(env: Env) -> None:
    assert (
        _put(env, "listed", {"targets": [{"model": A, "weight": 3}, {"model": B, "weight": 1}]}).status_code
        == 200
    )
    got = httpx.get(f"{env.url_b}/api/routes/listed", headers=env.admin, timeout=30).json()
    assert [(t["model"], t["share"]) for t in got["targets"]] == [(A, 75.0), (B, 25.0)]
    assert got["problems"] == []
    names = [r["name"] for r in httpx.get(f"{env.url}/api/routes", headers=env.admin, timeout=30).json()]
    assert "listed" in names


def test_routes_are_models_clients_can_list_and_retrieve(env: Env) -> None:
    assert _put(env, "catalogue", {"targets": [A], "fallbacks": [B]}).status_code == 200
    listed = httpx.get(f"{env.url}/v1/models", timeout=30).json()["data"]
    route = next(m for m in listed if m["id"] == "catalogue")
    assert route["owned_by"] == "corral-route"
    assert route["route"]["fallbacks"] == [B]
    assert {A, B} <= {m["id"] for m in listed}  # the models are still listed beside it
    got = httpx.get(f"{env.url}/v1/models/catalogue", timeout=30)
    assert got.status_code == 200 and got.json()["route"]["targets"] == [{"model": A, "weight": 1.0}]


def test_the_responses_api_through_a_route_names_its_route_and_target(env: Env) -> None:
    assert _put(env, "answers", {"targets": [B]}).status_code == 200
    body = {"model": "answers", "input": "hi", "max_output_tokens": 4}
    r = httpx.post(f"{env.url}/v1/responses", json=body, timeout=120)
    assert r.status_code == 200, r.text
    assert (r.headers["x-corral-route"], r.headers["x-corral-route-target"]) == ("answers", B)
    assert r.json()["model"] == B


@pytest.mark.parametrize("stream", [False, True])
def test_the_responses_api_falls_back_when_the_chosen_target_cannot_serve(env: Env, stream: bool) -> None:
    assert _put(env, "answers-fallback", {"targets": [NOWHERE], "fallbacks": [SPARE]}).status_code == 200
    body = {"model": "answers-fallback", "input": "hi", "max_output_tokens": 4, "stream": stream}
    r = httpx.post(f"{env.url}/v1/responses", json=body, timeout=120)
    assert r.status_code == 200, r.text
    assert (r.headers["x-corral-route"], r.headers["x-corral-route-target"]) == ("answers-fallback", SPARE)
    if stream:
        assert "response.output_text.delta" in r.text and f'"model":"{SPARE}"' in r.text.replace(" ", "")
    else:
        assert r.json()["model"] == SPARE and r.json()["output"][0]["content"][0]["text"]


@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/audio/speech", {"input": "hello there", "voice": "alloy", "response_format": "wav"}),
        ("/v1/images/generations", {"prompt": "a fox", "size": "64x64", "response_format": "b64_json"}),
    ],
)
def test_media_requests_fall_back_when_the_chosen_target_cannot_serve(
    env: Env, path: str, body: dict[str, Any]
) -> None:
    assert _put(env, "media-fallback", {"targets": [NOWHERE], "fallbacks": [SPARE]}).status_code == 200
    r = httpx.post(f"{env.url}{path}", json={"model": "media-fallback", **body}, timeout=120)
    assert r.status_code == 200, r.text
    assert (r.headers["x-corral-route"], r.headers["x-corral-route-target"]) == ("media-fallback", SPARE)
    assert r.content.startswith(b"RIFF") if "speech" in path else r.json()["data"][0]["b64_json"]


@pytest.mark.parametrize(
    "name, body, param, words",
    [
        (A, {"targets": [B]}, "name", "is a model or alias name"),
        ("r1", {"targets": ["no-such-model"]}, "targets[0].model", "neither a model, an alias nor a route"),
        ("r1", {"targets": [A], "fallbacks": ["nope"]}, "fallbacks[0]", "neither"),
        ("r1", {"targets": [A], "colour": "red"}, "colour", "unknown field"),
        ("r1", {"targets": [{"model": A, "weight": 1e12}]}, "targets[0].weight", "between 0 and 1000000"),
        ("r1", {"targets": [{"model": A, "weight": 0}]}, "targets", "sum to 0"),
        ("r1", {"targets": [A] + [f"m{i}" for i in range(16)]}, "targets", "at most 16"),
        ("r1", {"targets": [A], "description": "x" * 5000}, "description", "at most 1000"),
        ("r1", [], "body", "must be an object"),
        ("bad..name", {"targets": [A]}, "name", "must not contain '..'"),
    ],
)
def test_a_bad_route_is_a_400_naming_the_field(
    env: Env, name: str, body: Any, param: str, words: str
) -> None:
    r = _put(env, name, body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param
    assert words in error["message"]


def test_a_cycle_is_a_400_naming_it_and_a_route_in_use_cannot_be_deleted(env: Env) -> None:
    assert _put(env, "inner", {"targets": [A]}).status_code == 200
    assert _put(env, "outer", {"targets": ["inner"], "fallbacks": [B]}).status_code == 200
    r = _put(env, "inner", {"targets": [A], "fallbacks": ["outer"]})
    assert r.status_code == 400
    assert "routes would form a cycle: inner -> outer -> inner" in r.json()["error"]["message"]
    r = httpx.delete(f"{env.url}/api/routes/inner", headers=env.admin, timeout=30)
    assert r.status_code == 409
    assert "route 'inner' is a target or fallback of route(s) outer" in r.json()["error"]["message"]


def test_routes_need_an_admin_key(env: Env) -> None:
    assert httpx.get(f"{env.url}/api/routes", timeout=30).status_code == 401
