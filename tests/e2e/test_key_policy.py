"""API keys that carry policy, on real parts (two frontends with auth, a worker, simulator backends; issue 25
item 2): a key outside its models gets 403 and sees only its models; a key over its rpm gets 429 with OpenAI's
x-ratelimit-* headers; a key over its daily token quota gets insufficient_quota; the priority header is checked;
a policy edit on one frontend takes effect on the other; the admin API refuses bad fields by name; and the
requests admitted over a limit by two frontends together stay within the bound tenancy/limits.py states."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.cluster import Cluster, Proc
from support.faults import write_sim_model
from support.waiting import wait_for

pytestmark = pytest.mark.slow

A, B = "policy-a", "policy-b"
SYNC_S = 0.1  # --key-limits-sync-interval of both frontends


@dataclass
class Env:
    cluster: Cluster
    url: str
    url_b: str  # a second frontend on the same PostgreSQL and NATS
    admin: dict[str, str]


@pytest.fixture(scope="module")
def env(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Env]:
    c = Cluster(root=state_root / "e2e-key-policy", database_url=make_database(), nats_url=nats_url)
    for name in (A, B):
        write_sim_model(c.models_dir, name)
    args = ("--auth", "--usage-flush-interval", "0.2s", "--key-limits-sync-interval", f"{SYNC_S}s")
    extra: list[Proc] = []
    try:
        c.start_frontend(*args)
        proc_b, url_b = c.spawn_frontend("frontend-b", *args)
        extra.append(proc_b)
        c.start_worker("w1")
        yield Env(c, c.frontend_url, url_b, c.admin_headers)
    finally:
        c.stop()
        for proc in extra:
            proc.stop()


def _key(env: Env, **policy: Any) -> tuple[str, dict[str, str]]:
    """(id, request headers) of a new user key with `policy`."""
    created = httpx.post(
        f"{env.url}/api/keys", json={"role": "user", **policy}, headers=env.admin, timeout=30
    )
    assert created.status_code == 201, created.text
    return created.json()["id"], {"Authorization": f"Bearer {created.json()['key']}"}


def _chat(url: str, headers: dict[str, str], model: str = A) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=120)


def _models(url: str, headers: dict[str, str]) -> list[str]:
    listed = httpx.get(f"{url}/v1/models", headers=headers, timeout=30)
    assert listed.status_code == 200, listed.text
    return [m["id"] for m in listed.json()["data"]]


def test_a_key_outside_its_models_gets_403_and_lists_only_its_models(env: Env) -> None:
    _id, headers = _key(env, name="team-a", models=["policy-a*"])
    refused = _chat(env.url, headers, B)
    assert refused.status_code == 403
    error = refused.json()["error"]
    assert error["code"] == "model_not_allowed" and error["param"] == "model"
    assert "'team-a' may not use model 'policy-b'; its models: policy-a*" in error["message"]
    assert _models(env.url, headers) == [A]
    assert httpx.get(f"{env.url}/v1/models/{B}", headers=headers, timeout=30).status_code == 403
    assert _chat(env.url, headers, A).status_code == 200
    assert _models(env.url, env.admin) == [A, B]  # a key without a model list: every model


def test_a_key_over_its_rpm_gets_429_with_the_ratelimit_headers(env: Env) -> None:
    _id, headers = _key(env, name="rpm-3", rpm=3)
    for remaining in ("2", "1", "0"):
        served = httpx.get(f"{env.url}/v1/models", headers=headers, timeout=30)
        assert served.status_code == 200
        assert served.headers["x-ratelimit-limit-requests"] == "3"
        assert served.headers["x-ratelimit-remaining-requests"] == remaining
        assert served.headers["x-ratelimit-reset-requests"].endswith("s")
    refused = httpx.get(f"{env.url}/v1/models", headers=headers, timeout=30)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert "3 requests per minute (its `rpm`)" in refused.json()["error"]["message"]
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    unlimited = httpx.get(f"{env.url}/v1/models", headers=env.admin, timeout=30)
    assert not any(h.startswith("x-ratelimit") for h in unlimited.headers)  # keys without limits: no headers


def test_a_key_over_its_tpm_gets_429_once_the_engine_reported_its_tokens(env: Env) -> None:
    _id, headers = _key(env, name="tpm-1", tpm=1)
    served = _chat(env.url, headers)
    assert served.status_code == 200 and served.headers["x-ratelimit-remaining-tokens"] == "1"
    refused = _chat(env.url, headers)  # the first call's tokens were charged when its reply came
    assert refused.status_code == 429
    assert "1 tokens per minute (its `tpm`)" in refused.json()["error"]["message"]
    assert refused.headers["x-ratelimit-remaining-tokens"] == "0"


def test_a_key_over_its_daily_quota_gets_insufficient_quota(env: Env) -> None:
    _id, headers = _key(env, name="quota-1", tokens_per_day=1)
    assert _chat(env.url, headers).status_code == 200  # the engine's tokens are counted by the ledger
    refused = _chat(env.url, headers)
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["code"] == error["type"] == "insufficient_quota"
    assert "quota of 1 tokens per UTC day (its `tokens_per_day`)" in error["message"]
    assert "it resets at " in error["message"] and int(refused.headers["retry-after"]) <= 86400


def test_the_priority_header_may_name_only_a_known_class(env: Env) -> None:
    _id, headers = _key(env, name="prio", priority="high")
    refused = _chat(env.url, {**headers, "x-corral-priority": "urgent"})
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["param"] == "x-corral-priority"
    assert "unknown priority class 'urgent'; one of critical, high, normal, low, batch" in error["message"]
    assert _chat(env.url, {**headers, "x-corral-priority": "low"}).status_code == 200
    assert (
        _chat(env.url, {**headers, "x-corral-priority": "critical"}).status_code == 200
    )  # kept at its ceiling


def test_a_policy_change_on_one_frontend_takes_effect_on_the_other(env: Env) -> None:
    key_id, headers = _key(env, name="edited")
    assert _models(env.url_b, headers) == [A, B]  # frontend B caches the key with its policy
    changed = httpx.patch(f"{env.url}/api/keys/{key_id}", json={"models": [B]}, headers=env.admin, timeout=30)
    assert changed.status_code == 200 and changed.json()["models"] == [B]
    wait_for(lambda: _models(env.url_b, headers) == [B], "frontend B to see the key's new models", 10)
    assert _chat(env.url_b, headers, A).status_code == 403
    listed = httpx.get(f"{env.url}/api/keys", headers=env.admin, timeout=30).json()
    mine = next(k for k in listed if k["id"] == key_id)
    assert mine["models"] == [B] and mine["tenant"] == "edited" and mine["priority"] == "normal"
    assert "key" not in mine and "key_hash" not in mine


@pytest.mark.parametrize(
    "body, field",
    [
        ({"rpm": -1}, "rpm"),
        ({"tpm": 1 << 63}, "tpm"),  # past the bigint column
        ({"tokens_per_day": "10"}, "tokens_per_day"),
        ({"priority": "urgent"}, "priority"),
        ({"models": ["a/b"]}, "models"),
        ({"models": ["m"] * 257}, "models"),
        ({"tenant": "t" * 256}, "tenant"),
        ({"colour": "blue"}, "colour"),  # unknown fields are named
    ],
)
def test_bad_policy_fields_are_a_400_naming_the_field(env: Env, body: dict[str, Any], field: str) -> None:
    for reply in (
        httpx.post(f"{env.url}/api/keys", json=body, headers=env.admin, timeout=30),
        httpx.patch(f"{env.url}/api/keys/{_key(env)[0]}", json=body, headers=env.admin, timeout=30),
    ):
        assert reply.status_code == 400, reply.text
        assert field in reply.json()["error"]["message"]


def test_non_utf8_bodies_and_unknown_keys_are_refused(env: Env) -> None:
    headers = {**env.admin, "content-type": "application/json"}
    assert httpx.post(f"{env.url}/api/keys", content=b'{"name": "\xff"}', headers=headers).status_code == 400
    missing = httpx.patch(f"{env.url}/api/keys/nope", json={"rpm": 1}, headers=env.admin, timeout=30)
    assert missing.status_code == 404
    empty = httpx.patch(f"{env.url}/api/keys/nope", json={}, headers=env.admin, timeout=30)
    assert empty.status_code == 400 and "nothing to change" in empty.text


LIMIT = 20


def test_two_frontends_together_admit_a_limit_within_the_stated_bound(env: Env) -> None:
    """Requests alternate between the frontends, paced; tenancy/limits.py bounds what both admit in a minute
    by LIMIT + what the other frontend admitted within one sync interval plus NATS's delivery time. The bound
    is computed from the admissions seen, with the delivery time taken as 0.4 s (generous on a loaded CI
    machine); without sharing the two would admit 2 × LIMIT."""
    _id, headers = _key(env, name="shared", rpm=LIMIT)
    admitted: dict[str, list[float]] = {env.url: [], env.url_b: []}
    with httpx.Client(headers=headers, timeout=30) as client:
        for i in range(2 * LIMIT + 10):
            url = (env.url, env.url_b)[i % 2]
            reply = client.get(f"{url}/v1/models")
            assert reply.status_code in (200, 429), reply.text
            if reply.status_code == 200:
                admitted[url].append(time.monotonic())
            time.sleep(0.03)
    total = sum(len(at) for at in admitted.values())
    span_s = SYNC_S + 0.4

    def most_within(at: list[float]) -> int:
        return max((sum(1 for t in at if s <= t < s + span_s) for s in at), default=0)

    bound = LIMIT + max(most_within(at) for at in admitted.values())
    print(f"admitted {total} for rpm {LIMIT} over two frontends; stated bound {bound}")
    assert LIMIT <= total <= bound
    assert total < 2 * LIMIT


def test_a_key_allowed_a_route_may_use_its_targets_and_not_them_directly(env: Env) -> None:
    """The operator's route grants what it leads to; the key still may not name the target itself."""
    put = httpx.put(
        f"{env.url}/api/routes/team-route",
        json={"targets": [{"model": B, "weight": 1}]},
        headers=env.admin,
        timeout=30,
    )
    assert put.status_code == 200, put.text
    _id, headers = _key(env, name="route-only", models=["team-route"])
    served = _chat(env.url, headers, "team-route")
    assert served.status_code == 200, served.text
    assert served.headers["x-corral-route-target"] == B
    assert _chat(env.url, headers, B).status_code == 403
    _other, outsider = _key(env, name="no-route", models=[A])
    assert _chat(env.url, outsider, "team-route").status_code == 403
