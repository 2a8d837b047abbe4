"""Config revisions across two frontends: edits stop routing to old replicas at once, old replicas get
an acknowledged exact stop with durable retries, per-request parameters never change the revision; edits
commit one at a time per model and every frontend applies them in commit order (If-Match refuses a stale
base), and a restart takes the committed configuration, never the newest file."""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import nats
import pytest
import yaml
from nats.aio.msg import Msg

from corral.models.revision import config_revision
from support.cluster import Cluster, Proc
from support.waiting import wait_for_async

# a busy CI machine can hold one admin edit past httpx's 5 s default: each call gets 30 s unless it says
http_get = functools.partial(httpx.get, timeout=30)
http_put = functools.partial(httpx.put, timeout=30)
http_post = functools.partial(httpx.post, timeout=30)
http_patch = functools.partial(httpx.patch, timeout=30)
http_delete = functools.partial(httpx.delete, timeout=30)

pytestmark = pytest.mark.slow


@dataclass
class Env:
    cluster: Cluster
    a: str
    b: str
    b_models: Path
    admin: dict[str, str]


@pytest.fixture(scope="module")
def env(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Env]:
    c = Cluster(root=state_root / "e2e-revisions", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    for name in ("rev", "cut", "params", "race", "guarded", "lost", "drift", "restart"):
        (c.models_dir / f"{name}.yaml").write_text(_sim_yaml(name, 512))
    (c.models_dir / "mid-load.yaml").write_text(  # LoadModel takes 2 s: time to edit the config meanwhile
        "name: mid-load\nbackend: simulator\ncontext_size: 512\nparameters:\n  model: mid-load\n"
        'options:\n  - "load_time_s:2"\n'
    )
    b_models = c.root / "frontend-b-models"  # frontend B has its own models directory
    shutil.copytree(c.models_dir, b_models)
    extra: list[Proc] = []
    try:
        c.start_frontend("--expose-node-header")
        fb, url_b = c.spawn_frontend("frontend-b", "--expose-node-header", "--models-path", str(b_models))
        extra.append(fb)
        c.start_worker("w1")
        yield Env(c, c.frontend_url, url_b, b_models, c.admin_headers)
    finally:
        for proc in c.workers:
            os.kill(proc.popen.pid, signal.SIGCONT)
        c.stop()
        for proc in extra:
            proc.stop()


def _sim_yaml(name: str, context_size: int) -> str:
    return f"name: {name}\nbackend: simulator\ncontext_size: {context_size}\nparameters:\n  model: {name}\n"


def _chat(url: str, model: str, **extra: object) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **extra}
    return http_post(f"{url}/v1/chat/completions", json=body, timeout=60)


async def _rows(env: Env, model: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(env.cluster.database_url)
    try:
        return list(
            await conn.fetch("SELECT * FROM node_models WHERE model_name = $1 ORDER BY replica_index", model)
        )
    finally:
        await conn.close()


async def test_after_an_edit_on_one_frontend_the_other_never_routes_to_the_old_replica(env: Env) -> None:
    first = _chat(env.b, "rev")
    assert first.status_code == 200 and first.headers["X-Corral-Replica"].startswith("rev#0@")
    before = (await _rows(env, "rev"))[0]["config_revision"]
    edit = http_patch(f"{env.a}/api/model-configs/rev", json={"context_size": 1024}, headers=env.admin)
    assert edit.status_code == 200, edit.text
    assert edit.json()["config_revision"] != before and edit.json()["pending_cleanup"] >= 0
    after = _chat(env.b, "rev")  # right after the edit's response, on the other frontend
    assert after.status_code == 200
    assert (
        after.headers["X-Corral-Replica"] != first.headers["X-Corral-Replica"]
    )  # a new process, not the old
    assert "context_size: 1024" in (env.b_models / "rev.yaml").read_text()  # B adopted the edit
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        rows = await _rows(env, "rev")
        if len(rows) == 1:
            break
        await asyncio.sleep(0.2)
    assert [(r["state"], r["config_revision"]) for r in rows] == [("loaded", edit.json()["config_revision"])]
    assert after.headers["X-Corral-Replica"].endswith("@" + rows[0]["address"])


def test_edits_are_admin_only_and_invalid_configs_are_refused_naming_the_field(env: Env) -> None:
    assert http_patch(f"{env.a}/api/model-configs/rev", json={"context_size": 2}).status_code in (401, 403)
    bad = http_patch(f"{env.a}/api/model-configs/rev", json={"context_size": "big"}, headers=env.admin)
    assert bad.status_code == 400 and "context_size" in bad.json()["error"]["message"]
    wrong_name = http_put(
        f"{env.a}/api/model-configs/rev", content=b"name: other\nbackend: simulator\n", headers=env.admin
    )
    assert wrong_name.status_code == 400 and "rename" in wrong_name.json()["error"]["message"]


async def test_old_replicas_stay_unloading_while_the_worker_is_unreachable_and_stop_when_it_returns(
    env: Env,
) -> None:
    assert _chat(env.a, "cut").status_code == 200
    worker = env.cluster.workers[0]
    os.kill(worker.popen.pid, signal.SIGSTOP)  # the worker cannot answer the exact stop
    try:
        edit = http_patch(
            f"{env.a}/api/model-configs/cut", json={"context_size": 2048}, headers=env.admin, timeout=30
        )
        assert edit.status_code == 200 and edit.json()["pending_cleanup"] == 1  # the edit still succeeds
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            rows = await _rows(env, "cut")
            if rows and rows[0]["cleanup_attempts"] >= 1:
                break
            await asyncio.sleep(0.5)
        assert rows[0]["state"] == "unloading" and rows[0]["cleanup_error"]
        assert rows[0]["cleanup_next_retry_at"] is not None
    finally:
        os.kill(worker.popen.pid, signal.SIGCONT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and await _rows(env, "cut"):
        await asyncio.sleep(0.5)
    assert await _rows(env, "cut") == []


async def test_per_request_sampling_parameters_never_change_the_revision(env: Env) -> None:
    assert _chat(env.a, "params", temperature=0.1, top_p=0.5).status_code == 200
    before = [(r["replica_index"], r["config_revision"]) for r in await _rows(env, "params")]
    for temperature, top_p in ((0.9, 0.1), (1.5, 1.0), (0.0, 0.3)):
        assert _chat(env.b, "params", temperature=temperature, top_p=top_p).status_code == 200
    assert [(r["replica_index"], r["config_revision"]) for r in await _rows(env, "params")] == before


def test_a_disabled_model_is_not_served_and_can_be_enabled_again(env: Env) -> None:
    assert (
        http_post(f"{env.a}/api/model-configs/params/disable", headers=env.admin).json()["disabled"] is True
    )
    refused = _chat(env.b, "params")
    assert refused.status_code == 404 and "disabled" in refused.json()["error"]["message"]
    assert http_post(f"{env.a}/api/model-configs/params/enable", headers=env.admin).status_code == 200
    assert _chat(env.b, "params").status_code == 200


async def _states(env: Env) -> dict[str, asyncpg.Record]:
    conn = await asyncpg.connect(env.cluster.database_url)
    try:
        return {r["model_name"]: r for r in await conn.fetch("SELECT * FROM model_config_states")}
    finally:
        await conn.close()


async def _execute(env: Env, sql: str, *args: object) -> None:
    conn = await asyncpg.connect(env.cluster.database_url)
    try:
        await conn.execute(sql, *args)
    finally:
        await conn.close()


def _frontend_c(env: Env) -> Path:
    """Frontend C's own models directory, a copy of B's (to change before C starts)."""
    c_models = env.cluster.root / "frontend-c-models"
    shutil.rmtree(c_models, ignore_errors=True)
    shutil.copytree(env.b_models, c_models)
    return c_models


async def test_a_frontend_starting_with_a_newer_file_that_is_not_the_committed_config_takes_the_committed_one(
    env: Env,
) -> None:
    before = await _states(env)
    c_models = _frontend_c(env)
    stale = c_models / "restart.yaml"  # an edit that never committed, written after the last commit
    stale.write_text(_sim_yaml("restart", 333))
    future_s = time.time() + 3600
    os.utime(stale, (future_s, future_s))
    proc, url_c = env.cluster.spawn_frontend("frontend-c", "--models-path", str(c_models))
    try:
        served = http_get(f"{url_c}/api/model-configs/restart", headers=env.admin).json()
    finally:
        proc.stop()
    after = await _states(env)
    assert {k: r["config_revision"] for k, r in after.items()} == {
        k: r["config_revision"] for k, r in before.items()
    }
    assert after["restart"]["config_seq"] == before["restart"]["config_seq"]  # nothing was republished
    assert served["config_revision"] == before["restart"]["config_revision"]
    assert yaml.safe_load(stale.read_text()) == yaml.safe_load(before["restart"]["config_yaml"])  # rewritten


async def test_a_frontend_starting_rehashes_a_stored_revision_that_is_not_its_configs_hash(env: Env) -> None:
    stored = (await _states(env))["drift"]
    await _execute(
        env,
        "UPDATE model_config_states SET config_revision = 'hashed-by-an-old-release' "
        "WHERE model_name = 'drift'",
    )
    proc, _url = env.cluster.spawn_frontend("frontend-c", "--models-path", str(_frontend_c(env)))
    proc.stop()
    healed = (await _states(env))["drift"]
    assert healed["config_revision"] == config_revision(yaml.safe_load(stored["config_yaml"]))
    assert healed["config_seq"] > stored["config_seq"]  # republished: every frontend re-reads it


def test_node_model_listings_carry_the_replica_revision_and_cleanup_fields(env: Env) -> None:
    assert _chat(env.a, "params").status_code == 200  # a loaded replica of its own
    nodes = http_get(f"{env.a}/api/nodes", headers=env.admin).json()
    node_id = next(n["id"] for n in nodes if n["name"] == "w1")
    for url, headers in (
        (f"{env.a}/api/nodes/{node_id}/models", env.admin),
        (f"{env.a}/api/node/{node_id}/models", env.cluster.node_headers("w1")),
    ):
        rows = http_get(url, headers=headers).json()
        assert rows, url
        for field in (
            "state",
            "config_revision",
            "effective_options_hash",
            "cleanup_error",
            "cleanup_attempts",
            "cleanup_next_retry_at",
        ):
            assert field in rows[0], (url, field)
        loaded = [r for r in rows if r["state"] == "loaded"]
        assert loaded and all(len(r["effective_options_hash"]) == 64 for r in loaded), (url, rows)  # written


def test_an_alias_repointed_through_the_api_moves_requests_and_its_rule_on_every_frontend(env: Env) -> None:
    admin = {**env.admin, "Content-Type": "application/yaml"}
    created = http_put(f"{env.a}/api/model-configs/prod", content=b"name: prod\nalias: rev\n", headers=admin)
    assert created.status_code == 200, created.text
    rule = http_post(
        f"{env.a}/api/nodes/scheduling", json={"model_name": "prod", "max_replicas": 2}, headers=env.admin
    )
    assert rule.status_code == 200, rule.text
    assert _chat(env.b, "prod").headers["X-Corral-Replica"].startswith("rev#")
    repointed = http_put(
        f"{env.a}/api/model-configs/prod", content=b"name: prod\nalias: params\n", headers=admin
    )
    assert repointed.json() == {"name": "prod", "alias": "params"}
    assert (
        _chat(env.b, "prod").headers["X-Corral-Replica"].startswith("params#")
    )  # the other frontend follows
    assert http_get(f"{env.b}/api/nodes/scheduling/prod", headers=env.admin).json()["target"] == "params"
    dangling = http_put(
        f"{env.a}/api/model-configs/prod", content=b"name: prod\nalias: nope\n", headers=admin
    )
    assert (
        dangling.status_code == 400
        and "'nope' is not a configured model" in dangling.json()["error"]["message"]
    )


async def test_an_edit_during_a_load_is_absorbed_by_the_job_and_every_request_is_served(env: Env) -> None:
    nc = await nats.connect(env.cluster.nats_url)
    installs: list[bytes] = []

    async def count(msg: Msg) -> None:
        installs.append(msg.data)

    sub = await nc.subscribe("nodes.*.backend.install", cb=count)
    body = {"model": "mid-load", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    try:
        async with httpx.AsyncClient(timeout=90) as client:
            before = [
                asyncio.create_task(client.post(f"{(env.a, env.b)[i % 2]}/v1/chat/completions", json=body))
                for i in range(6)
            ]
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # the job is inside LoadModel under the old revision
                status = await client.get(f"{env.a}/api/models/mid-load/load-status")
                if status.status_code == 200 and status.json()["state"] == "loading":
                    break
                await asyncio.sleep(0.05)
            assert status.json()["state"] == "loading"
            edit = await client.patch(
                f"{env.a}/api/model-configs/mid-load", json={"context_size": 1024}, headers=env.admin
            )
            assert edit.status_code == 200, edit.text
            after = [
                asyncio.create_task(client.post(f"{(env.a, env.b)[i % 2]}/v1/chat/completions", json=body))
                for i in range(6)
            ]
            responses = await asyncio.gather(*before, *after)
    finally:
        await sub.unsubscribe()
        await nc.close()
    assert [r.status_code for r in responses] == [200] * 12, [
        r.text for r in responses if r.status_code != 200
    ]
    assert len([d for d in installs if b'"mid-load"' in d]) == 2  # the first load and its redo, nothing more
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        rows = await _rows(env, "mid-load")
        if len(rows) == 1:
            break
        await asyncio.sleep(0.2)
    assert [(r["state"], r["config_revision"]) for r in rows] == [("loaded", edit.json()["config_revision"])]


def _etag(response: httpx.Response) -> str:
    assert response.headers["ETag"] == f'"{response.json()["config_revision"]}"', response.headers
    return response.headers["ETag"]


def test_an_edit_based_on_a_stale_revision_is_a_409_naming_the_current_one_on_every_frontend(
    env: Env,
) -> None:
    url_a, url_b = f"{env.a}/api/model-configs/guarded", f"{env.b}/api/model-configs/guarded"
    base = _etag(http_get(url_a, headers=env.admin))
    first = http_patch(
        url_a, json={"context_size": 1024}, headers={**env.admin, "If-Match": base}, timeout=30
    )
    assert first.status_code == 200, first.text
    current = _etag(first)
    assert current != base
    for stale in (
        http_patch(url_b, json={"context_size": 2048}, headers={**env.admin, "If-Match": base}),
        http_put(
            url_a, content=_sim_yaml("guarded", 2048).encode(), headers={**env.admin, "If-Match": f"W/{base}"}
        ),
    ):
        assert stale.status_code == 409, stale.text
        assert stale.json()["config_revision"] == first.json()["config_revision"]
        assert stale.json()["error"]["param"] == "If-Match"
        assert (
            f"its current revision is {first.json()['config_revision']}" in stale.json()["error"]["message"]
        )
    assert _etag(http_get(url_b, headers=env.admin)) == current  # the refused edits changed nothing
    second = http_put(
        url_b,
        content=_sim_yaml("guarded", 4096).encode(),
        headers={**env.admin, "If-Match": f'"other", {current}'},
        timeout=30,
    )
    assert second.status_code == 200, second.text
    assert _etag(http_get(url_a, headers=env.admin)) == _etag(second)


async def test_concurrent_edits_over_two_frontends_leave_both_their_files_and_postgresql_on_the_last_commit(
    env: Env,
) -> None:
    async def edit(client: httpx.AsyncClient, index: int) -> httpx.Response:
        url = f"{(env.a, env.b)[index % 2]}/api/model-configs/race"
        if index % 3 == 0:
            return await client.put(url, content=_sim_yaml("race", 1000 + index).encode(), headers=env.admin)
        return await client.patch(url, json={"context_size": 1000 + index}, headers=env.admin)

    async with httpx.AsyncClient(timeout=120) as client:
        responses = await asyncio.gather(*(edit(client, i) for i in range(30)))
    assert [r.status_code for r in responses] == [200] * 30, [
        r.text for r in responses if r.status_code != 200
    ]
    committed = (await _states(env))["race"]
    last = yaml.safe_load(committed["config_yaml"])
    assert committed["config_revision"] in {r.json()["config_revision"] for r in responses}
    for url in (env.a, env.b):  # every edit's response waited for both frontends: they agree now, no restart
        served = http_get(f"{url}/api/model-configs/race", headers=env.admin).json()
        assert (served["config_revision"], served["config"]) == (committed["config_revision"], last), url
    for models in (env.cluster.models_dir, env.b_models):
        assert yaml.safe_load((models / "race.yaml").read_text()) == last, models
        assert not [p.name for p in models.iterdir() if p.name.endswith(".tmp")]


async def test_a_commit_whose_event_never_arrived_is_taken_by_every_frontend_within_the_resync_interval(
    env: Env,
) -> None:
    text = _sim_yaml("lost", 777)
    await _execute(
        env,
        "UPDATE model_config_states SET config_yaml = $1, config_revision = $2, "
        "config_seq = nextval('model_config_seq') WHERE model_name = 'lost'",
        text,
        config_revision(yaml.safe_load(text)),
    )  # committed, announced to nobody

    async def everywhere() -> bool:
        async with httpx.AsyncClient() as client:
            served = [
                (await client.get(f"{url}/api/model-configs/lost", headers=env.admin)).json()
                for url in (env.a, env.b)
            ]
        return all(s["config"].get("context_size") == 777 for s in served)

    await wait_for_async(
        everywhere, "both frontends to take the committed config of 'lost' (RESYNC_INTERVAL_S 10 s)", 30
    )
    assert "context_size: 777" in (env.b_models / "lost.yaml").read_text()
