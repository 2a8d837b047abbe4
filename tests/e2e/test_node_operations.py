"""Per-node backend and model operations, the activity record and backend logs, on real processes (issue 11).

Two frontends and two workers on one PostgreSQL and NATS; backends installed from a local gallery
(`simcopy`: the simulator engine in the reference's backend layout, installed by directory copy).
A worker that "never answers" is a real worker stopped with SIGSTOP.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import websockets
from websockets.asyncio.client import connect as ws_connect

from support.cluster import Cluster, Proc
from support.processes import backend_pid, gone

pytestmark = pytest.mark.slow

TIMEOUT_FLAGS = (
    "--backend-install-timeout",
    "4s",
    "--backend-upgrade-timeout",
    "10s",
    "--node-op-timeout",
    "5s",
)
SIMCOPY_RUN = '#!/bin/sh\necho "simcopy backend starting"\nexec "${CORRAL_PYTHON:-python3}" -m corral backend simulator "$@"\n'
BROKEN_RUN = '#!/bin/sh\necho "broken backend: cannot find libfoo.so" >&2\necho "giving up" >&2\nexit 3\n'


def _gallery(root: Path) -> Path:
    """A gallery index with two directory backends: one that serves, one that dies at start."""
    for name, run in (("simcopy", SIMCOPY_RUN), ("broken", BROKEN_RUN)):
        directory = root / "gallery" / name
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "run.sh").write_text(run)
        (directory / "run.sh").chmod(0o755)
        (directory / "metadata.json").write_text(json.dumps({"name": name, "version": "1"}))
    index = root / "gallery" / "index.yaml"
    index.write_text("- name: simcopy\n  uri: simcopy\n  version: '1'\n- name: broken\n  uri: broken\n")
    return index


class Env:
    def __init__(self, cluster: Cluster, index: Path) -> None:
        self.c, self.index = cluster, index
        self.b_proc: Proc | None = None
        self.b = ""
        self.nodes: dict[str, str] = {}

    @property
    def a(self) -> str:
        return self.c.frontend_url

    def h(self) -> dict[str, str]:
        return self.c.admin_headers

    def get(self, url: str, path: str) -> httpx.Response:
        return httpx.get(f"{url}{path}", headers=self.h(), timeout=30)

    def post(self, url: str, path: str, body: Any) -> httpx.Response:
        return httpx.post(f"{url}{path}", headers=self.h(), json=body, timeout=60)

    def chat(self, model: str) -> httpx.Response:
        return httpx.post(
            f"{self.a}/v1/chat/completions",
            timeout=90,
            json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
        )

    def job(self, url: str, job_id: str) -> dict[str, Any]:
        response = self.get(url, f"/api/backends/job/{job_id}")
        assert response.status_code == 200, response.text
        return dict(response.json())

    def wait_job(
        self, url: str, job_id: str, until: Callable[[dict[str, Any]], bool], timeout_s: float = 60
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        view: dict[str, Any] = {}
        while time.monotonic() < deadline:
            view = self.job(url, job_id)
            if until(view):
                return view
            time.sleep(0.3)
        raise AssertionError(f"job {job_id} never reached the expected state: {view}")

    def rows(self, node: str) -> list[dict[str, Any]]:
        return list(self.get(self.a, f"/api/nodes/{self.nodes[node]}/models").json())


@pytest.fixture(scope="module")
def env(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Env]:
    root = state_root / "e2e-backend-ops"
    index = _gallery(root)
    c = Cluster(root=root, database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    for name, backend in (
        ("sim-a", "simcopy"),
        ("sim-b", "simcopy"),
        ("sim-c", "simulator"),
        ("bad", "broken"),
    ):
        (c.models_dir / f"{name}.yaml").write_text(
            f"name: {name}\nbackend: {backend}\ncontext_size: 512\nparameters:\n  model: {name}\n"
        )
    e = Env(c, index)
    try:
        c.start_frontend(*TIMEOUT_FLAGS)
        e.b_proc, e.b = c.spawn_frontend("frontend-b", *TIMEOUT_FLAGS)
        for name in ("w1", "w2"):
            c.start_worker(
                name, "--backends-path", str(root / name / "backends"), "--backend-galleries", str(index)
            )
        for node in e.get(e.a, "/api/nodes").json():
            e.nodes[node["name"]] = node["id"]
        yield e
    finally:
        if e.b_proc is not None:
            e.b_proc.stop()
        c.stop()


def test_routes_need_an_admin_key(env: Env) -> None:
    node = env.nodes["w1"]
    for method, path in (
        ("GET", f"/api/nodes/{node}/backends"),
        ("POST", f"/api/nodes/{node}/backends/install"),
        ("POST", f"/api/nodes/{node}/backends/upgrade"),
        ("POST", f"/api/nodes/{node}/backends/delete"),
        ("POST", f"/api/nodes/{node}/models/unload"),
        ("POST", f"/api/nodes/{node}/models/delete"),
        ("POST", "/api/backends/install"),
        ("GET", "/api/backends/job/x"),
        ("GET", "/api/operations"),
        ("GET", "/api/operations/history"),
        ("DELETE", "/api/operations/history"),
        ("GET", f"/api/nodes/{node}/backend-logs"),
        ("GET", f"/api/nodes/{node}/backend-logs/sim-a"),
    ):
        response = httpx.request(method, f"{env.a}{path}", json={}, timeout=10)
        assert response.status_code == 401, (method, path, response.text)
        wrong = httpx.request(
            method, f"{env.a}{path}", json={}, headers={"Authorization": "Bearer nope"}, timeout=10
        )
        assert wrong.status_code == 401, (method, path)

    async def refused() -> None:
        url = env.a.replace("http", "ws") + f"/ws/nodes/{node}/backend-logs/sim-a"
        with pytest.raises(websockets.exceptions.InvalidStatus) as info:
            async with ws_connect(url):
                pass
        assert info.value.response.status_code == 403

    asyncio.run(refused())


def test_bad_input_is_a_400_naming_the_field(env: Env) -> None:
    node = env.nodes["w1"]
    stranger = str(uuid.uuid4())
    for path, body in (
        (f"/api/nodes/{stranger}/backends/install", {"backend": "simcopy"}),
        (f"/api/nodes/{stranger}/backends/delete", {"backend": "simcopy"}),
        (f"/api/nodes/{stranger}/models/unload", {"model_name": "sim-a"}),
    ):
        response = env.post(env.a, path, body)
        assert response.status_code == 404 and stranger in response.text, response.text
    assert env.get(env.a, f"/api/nodes/{stranger}/backends").status_code == 404
    assert env.get(env.a, f"/api/nodes/{stranger}/backend-logs").status_code == 404
    cases: tuple[tuple[str, dict[str, object], str], ...] = (
        (f"/api/nodes/{node}/backends/install", {"backend": "../../etc"}, "backend"),
        (f"/api/nodes/{node}/backends/install", {"backend": "a/b"}, "backend"),
        (f"/api/nodes/{node}/backends/install", {}, "backend"),
        (f"/api/nodes/{node}/backends/install", {"uri": "file:///x"}, "name"),
        (
            f"/api/nodes/{node}/backends/install",
            {"backend": "simcopy", "backend_galleries": [{"url": 5}]},
            "backend_galleries[0]",
        ),
        (f"/api/nodes/{node}/backends/upgrade", {"backend": "x" * 5000}, "backend"),
        (f"/api/nodes/{node}/backends/delete", {"backend": ".."}, "backend"),
        (f"/api/nodes/{node}/models/unload", {"model_name": "../sim-a"}, "model_name"),
        (f"/api/nodes/{node}/models/delete", {"model_name": "a/../../b"}, "model_name"),
        ("/api/backends/install", {"backend": "simcopy"}, "node_ids"),
        (
            "/api/backends/install",
            {"backend": "simcopy", "node_ids": [node], "selector": {"a": "b"}},
            "node_ids",
        ),
        ("/api/backends/install", {"backend": "simcopy", "selector": {"a": 1}}, "selector"),
    )
    for path, bad_body, field in cases:
        response = env.post(env.a, path, bad_body)
        assert response.status_code == 400, (path, bad_body, response.text)
        assert f"'{field}'" in response.json()["error"]["message"], response.text
    not_json = httpx.post(
        f"{env.a}/api/nodes/{node}/backends/install", content=b"[[[", headers=env.h(), timeout=10
    )
    assert not_json.status_code == 400 and "'body'" in not_json.text
    huge = httpx.post(
        f"{env.a}/api/nodes/{node}/backends/install",
        headers=env.h(),
        timeout=30,
        content=b'{"backend": "' + b"x" * (4 << 20) + b'"}',
    )
    assert huge.status_code == 413 and "CORRAL_ADMIN_MAX_BODY" in huge.text
    unknown = env.post(env.a, "/api/backends/install", {"backend": "simcopy", "node_ids": [node, stranger]})
    assert unknown.status_code == 404 and stranger in unknown.text
    assert env.get(env.a, "/api/backends/job/nope").status_code == 404
    nobody = env.post(env.a, "/api/backends/install", {"backend": "simcopy", "selector": {"gpu": "h100"}})
    assert nobody.status_code == 404 and "selector" in nobody.text


def test_agent_nodes_run_no_backends(env: Env) -> None:
    registered = httpx.post(
        f"{env.a}/api/node/register",
        timeout=10,
        headers={"Authorization": f"Bearer {env.c.token}"},
        json={"name": "agent-1", "node_type": "agent", "token": env.c.token},
    )
    assert registered.status_code == 201, registered.text
    agent = registered.json()["id"]
    assert env.get(env.a, f"/api/nodes/{agent}/backends").json() == []  # without asking NATS
    refused = env.post(env.a, f"/api/nodes/{agent}/backends/install", {"backend": "simcopy"})
    assert refused.status_code == 400 and "agent node" in refused.text
    assert httpx.delete(f"{env.a}/api/nodes/{agent}", headers=env.h(), timeout=10).status_code == 200


def test_install_to_two_workers_rolls_up_and_a_silent_worker_is_busy_not_failed(env: Env) -> None:
    w2 = env.c.workers[1].popen
    os.kill(w2.pid, signal.SIGSTOP)  # a worker that never answers
    try:
        response = env.post(
            env.a,
            "/api/backends/install",
            {"backend": "simcopy", "node_ids": [env.nodes["w1"], env.nodes["w2"]]},
        )
        assert response.status_code == 202, response.text
        body = response.json()
        assert body["statusUrl"] == f"/api/backends/job/{body['jobID']}" and body["message"]
        busy = env.wait_job(env.b, body["jobID"], lambda v: v["busy"] == 1 and v["done"] == 1, timeout_s=30)
        assert busy["summary"] == "1 of 2 nodes done, 1 worker(s) busy"
        rows = {n["node_name"]: n for n in busy["nodes"]}
        assert rows["w1"]["state"] == "Done" and rows["w2"]["state"] == "Worker busy"
        assert (
            "LOCALAI_NATS_BACKEND_INSTALL_TIMEOUT" in rows["w2"]["message"]
        )  # the knob that raises the wait
        assert rows["w2"]["error"] is None and not busy["processed"]
    finally:
        os.kill(w2.pid, signal.SIGCONT)
    done = env.wait_job(env.a, body["jobID"], lambda v: v["processed"], timeout_s=60)
    assert done["summary"] == "2 of 2 nodes done" and done["status"] == "completed"
    assert {n["state"] for n in done["nodes"]} == {"Done"}
    listed = env.get(env.a, f"/api/nodes/{env.nodes['w2']}/backends")
    assert listed.status_code == 200
    names = {b["name"]: b for b in listed.json()}
    assert "simcopy" in names and not names["simcopy"]["is_system"] and names["simulator"]["is_system"]


def test_an_intent_survives_its_frontend_and_another_frontend_resumes_it(env: Env) -> None:
    w1 = env.c.workers[0].popen
    assert env.c.frontend is not None
    os.kill(w1.pid, signal.SIGSTOP)  # keep the first attempt in flight while its frontend dies
    try:
        response = env.post(env.a, f"/api/nodes/{env.nodes['w1']}/backends/upgrade", {"backend": "simcopy"})
        assert response.status_code == 202, response.text
        job_id = response.json()["jobID"]
        started = env.wait_job(env.b, job_id, lambda v: v["state"] == "Upgrading", timeout_s=20)
        env.c.frontend.popen.kill()  # SIGKILL: no goodbye, its lease must run out
        env.c.frontend.popen.wait()
    finally:
        os.kill(w1.pid, signal.SIGCONT)
    done = env.wait_job(env.b, job_id, lambda v: v["processed"], timeout_s=90)
    assert done["status"] == "completed", done
    assert started["started_at"] == done["started_at"]
    # The first frontend is back (same database): it sees the same record.
    env.c.frontend, env.c.frontend_url = env.c.spawn_frontend("frontend-a2", *TIMEOUT_FLAGS)
    assert env.job(env.a, job_id)["status"] == "completed"


def test_upgrade_stops_exactly_the_processes_it_reports(env: Env) -> None:
    for model in ("sim-a", "sim-c"):
        assert env.chat(model).status_code == 200
    rows = {r["model_name"]: r for node in ("w1", "w2") for r in env.rows(node)}
    node_name = next(n for n in ("w1", "w2") if any(r["model_name"] == "sim-a" for r in env.rows(n)))
    other = "w2" if node_name == "w1" else "w1"
    pids = {m: backend_pid(r["address"].rpartition(":")[2], env.c.workers) for m, r in rows.items()}
    response = env.post(env.a, f"/api/nodes/{env.nodes[node_name]}/backends/upgrade", {"backend": "simcopy"})
    done = env.wait_job(env.a, response.json()["jobID"], lambda v: v["processed"], timeout_s=60)
    assert done["status"] == "completed", done
    assert "sim-a#0" in done["message"] and "sim-c" not in done["message"]
    pid_a = pids["sim-a"]
    assert pid_a is not None and gone(pid_a)
    assert all(r["model_name"] != "sim-a" for r in env.rows(node_name))
    pid_c = pids["sim-c"]
    assert pid_c is not None and not gone(pid_c, timeout_s=0.5)  # another backend's process: untouched
    assert any(r["model_name"] == "sim-c" for r in env.rows("w1") + env.rows("w2"))
    assert env.job(env.a, response.json()["jobID"])["node_name"] == node_name
    assert other in env.nodes


def test_delete_removes_the_backend_and_its_replicas(env: Env) -> None:
    assert env.chat("sim-b").status_code == 200
    node_name = next(n for n in ("w1", "w2") if any(r["model_name"] == "sim-b" for r in env.rows(n)))
    row = next(r for r in env.rows(node_name) if r["model_name"] == "sim-b")
    pid = backend_pid(row["address"].rpartition(":")[2], env.c.workers)
    response = env.post(env.b, f"/api/nodes/{env.nodes[node_name]}/backends/delete", {"backend": "simcopy"})
    assert response.status_code == 200, response.text
    assert (
        response.json()["message"] == "backend deleted"
        and "sim-b#0" in response.json()["stopped_process_keys"]
    )
    assert pid is not None and gone(pid)
    assert all(r["model_name"] != "sim-b" for r in env.rows(node_name))
    names = [b["name"] for b in env.get(env.a, f"/api/nodes/{env.nodes[node_name]}/backends").json()]
    assert "simcopy" not in names and "simulator" in names
    again = env.post(env.a, f"/api/nodes/{env.nodes[node_name]}/backends/delete", {"backend": "simulator"})
    assert again.status_code == 502 and "system backend" in again.text


def test_unload_and_delete_a_model_on_a_node(env: Env) -> None:
    node_name = next(n for n in ("w1", "w2") if any(r["model_name"] == "sim-c" for r in env.rows(n)))
    node = env.nodes[node_name]
    row = next(r for r in env.rows(node_name) if r["model_name"] == "sim-c")
    pid = backend_pid(row["address"].rpartition(":")[2], env.c.workers)
    unloaded = env.post(env.a, f"/api/nodes/{node}/models/unload", {"model_name": "sim-c"})
    assert unloaded.status_code == 200 and unloaded.json()["message"] == "model unloaded", unloaded.text
    assert unloaded.json()["stopped_process_keys"] == ["sim-c#0"]
    assert pid is not None and gone(pid) and all(r["model_name"] != "sim-c" for r in env.rows(node_name))
    files = env.c.root / node_name / "models" / "sim-c"
    files.mkdir(parents=True, exist_ok=True)
    (files / "weights.bin").write_bytes(b"x" * 10)
    deleted = env.post(env.b, f"/api/nodes/{node}/models/delete", {"model_name": "sim-c"})
    assert deleted.status_code == 200 and deleted.json()["message"] == "model deleted from node"
    assert not files.exists()


def test_backend_logs_follow_live_and_a_failed_start_shows_its_last_lines(env: Env) -> None:
    assert env.chat("sim-c").status_code == 200
    node_name = next(n for n in ("w1", "w2") if any(r["model_name"] == "sim-c" for r in env.rows(n)))
    node = env.nodes[node_name]
    listed = env.get(env.b, f"/api/nodes/{node}/backend-logs")
    assert listed.status_code == 200 and "sim-c" in [m["model_id"] for m in listed.json()]
    snapshot = env.get(env.b, f"/api/nodes/{node}/backend-logs/sim-c?limit=50")
    assert snapshot.status_code == 200 and snapshot.json()["lines"]
    assert env.get(env.b, f"/api/nodes/{node}/backend-logs/never-loaded").status_code == 404
    too_many = env.get(env.b, f"/api/nodes/{node}/backend-logs/sim-c?limit=999999")
    assert too_many.status_code == 400 and "limit" in too_many.text

    async def follow() -> list[dict[str, Any]]:
        url = env.b.replace("http", "ws") + f"/ws/nodes/{node}/backend-logs/sim-c"
        got: list[dict[str, Any]] = []
        async with ws_connect(url, additional_headers=env.h()) as ws:
            got.append(json.loads(await asyncio.wait_for(ws.recv(), 10)))  # the snapshot first
            unload = asyncio.create_task(
                asyncio.to_thread(
                    env.post, env.a, f"/api/nodes/{node}/models/unload", {"model_name": "sim-c"}
                )
            )
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not any("exited" in g.get("text", "") for g in got):
                got.append(json.loads(await asyncio.wait_for(ws.recv(), 20)))
            assert (await unload).status_code == 200
        return got

    lines = asyncio.run(follow())
    assert any("backend exited with code" in line.get("text", "") for line in lines), lines
    seqs = [(line["process_key"], line["seq"]) for line in lines if "seq" in line]
    assert len(seqs) == len(set(seqs))  # nothing repeated at the snapshot/live seam

    failed = env.chat("bad")
    assert failed.status_code >= 500
    assert "cannot find libfoo.so" in failed.text and "giving up" in failed.text, failed.text


def _make_history(env: Env) -> None:
    """One operation of every kind the record keeps, each with its outcome, made here (not by earlier tests)."""
    w1 = env.nodes["w1"]
    fanout = env.post(env.a, "/api/backends/install", {"backend": "simcopy", "node_ids": [w1]})
    assert fanout.status_code == 202, fanout.text
    assert env.wait_job(env.a, fanout.json()["jobID"], lambda v: v["processed"])["status"] == "completed"
    upgrade = env.post(env.a, f"/api/nodes/{w1}/backends/upgrade", {"backend": "simcopy"})
    assert upgrade.status_code == 202, upgrade.text
    assert env.wait_job(env.a, upgrade.json()["jobID"], lambda v: v["processed"])["status"] == "completed"
    assert env.post(env.a, f"/api/nodes/{w1}/backends/delete", {"backend": "simcopy"}).status_code == 200
    assert env.post(env.a, f"/api/nodes/{w1}/backends/delete", {"backend": "simulator"}).status_code == 502
    assert env.chat("sim-c").status_code == 200
    node = next(env.nodes[n] for n in ("w1", "w2") if any(r["model_name"] == "sim-c" for r in env.rows(n)))
    assert env.post(env.a, f"/api/nodes/{node}/models/unload", {"model_name": "sim-c"}).status_code == 200
    assert env.post(env.a, f"/api/nodes/{node}/models/delete", {"model_name": "sim-c"}).status_code == 200
    assert env.chat("bad").status_code >= 500


def test_the_activity_record_is_shared_and_cleared_for_every_frontend(env: Env) -> None:
    _make_history(env)
    history_a = env.get(env.a, "/api/operations/history").json()["operations"]
    history_b = env.get(env.b, "/api/operations/history").json()["operations"]
    assert history_a == history_b
    kinds = {(op["taskType"], op["outcome"]) for op in history_a}
    for kind in (
        ("fanout", "completed"),
        ("backend_upgrade", "completed"),
        ("backend_delete", "completed"),
        ("model_load", "completed"),
        ("model_load", "failed"),
        ("backend_delete", "failed"),
        ("model_unload", "completed"),
        ("model_delete", "completed"),
    ):
        assert kind in kinds, (kind, kinds)
    assert all(op["startedAt"] and op["finishedAt"] for op in history_a)

    async def seed_load(sql: str) -> None:  # a model load in progress, as a frontend's load job writes it
        conn = await asyncpg.connect(env.c.database_url)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(
        seed_load(
            "INSERT INTO model_load_jobs (tracking_key, state, owner_replica, node_name, bytes_sent, "
            "total_bytes, file_index, total_files) VALUES ('ghost', 'staging', 'f', 'w1', 50, 200, 1, 1)"
        )
    )
    live = env.get(env.b, "/api/operations")
    assert live.status_code == 200 and set(live.json()) == {"operations"}
    staging = next(op for op in live.json()["operations"] if op["id"] == "staging:ghost")
    assert staging == {
        **staging,
        "jobID": "staging:ghost",
        "taskType": "staging",
        "progress": 25,
        "currentBytes": 50,
        "totalBytes": 200,
        "nodeName": "w1",
        "isBackend": False,
        "isDeletion": False,
    }
    asyncio.run(seed_load("DELETE FROM model_load_jobs WHERE tracking_key = 'ghost'"))
    cleared = httpx.delete(f"{env.a}/api/operations/history", headers=env.h(), timeout=10)
    assert cleared.status_code == 200 and cleared.json()["cleared"] >= len(kinds)
    assert env.get(env.b, "/api/operations/history").json()["operations"] == []
    assert env.get(env.a, "/api/operations/history").json()["operations"] == []
