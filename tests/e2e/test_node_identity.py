"""Node identity on real processes: a node's name cannot be taken over with the shared token, a
node acts only as itself, a restarted worker registers as itself, an admin re-keys a node that
lost its credential, and an admin's drain outlives the worker's re-registration and resume calls."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.cluster import Cluster, Proc, free_port_pair, spawn, wait_http
from support.waiting import wait_for

pytestmark = pytest.mark.slow

FAST_HEALTH = [
    "--stale-node-threshold",
    "3s",
    "--node-heartbeat-checkpoint",
    "1s",
    "--health-check-interval",
    "0.3s",
]


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = Cluster(root=state_root / "e2e-node-identity", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    (c.models_dir / "sim.yaml").write_text("name: sim\nbackend: simulator\nparameters:\n  model: sim\n")
    try:
        c.start_frontend(*FAST_HEALTH, "--expose-node-header")
        yield c
    finally:
        c.stop()


def _admin(cluster: Cluster, method: str, path: str) -> httpx.Response:
    return httpx.request(method, f"{cluster.frontend_url}{path}", headers=cluster.admin_headers, timeout=30)


def _node(cluster: Cluster, name: str) -> dict[str, Any]:
    return next(n for n in _admin(cluster, "GET", "/api/nodes").json() if n["name"] == name)


def _chat(cluster: Cluster) -> httpx.Response:
    return httpx.post(
        f"{cluster.frontend_url}/v1/chat/completions",
        timeout=60,
        json={"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    )


def _spawn_worker(cluster: Cluster, name: str) -> tuple[Proc, int]:
    base = free_port_pair()
    return spawn(
        name, [*cluster.worker_argv(name, base), "--heartbeat-interval", "0.5s"], cluster.root / "logs"
    ), base


def _start_worker(cluster: Cluster, name: str) -> Proc:
    proc, base = _spawn_worker(cluster, name)
    wait_http(f"http://127.0.0.1:{base - 1}/readyz", proc)
    cluster.workers.append(proc)
    return proc


def _stop_worker(cluster: Cluster, proc: Proc) -> None:
    cluster.workers.remove(proc)
    assert proc.stop() == 0


def _node_call(cluster: Cluster, method: str, path: str, node_token: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {cluster.token}"}
    if node_token is not None:
        headers["X-Node-Token"] = node_token
    return httpx.request(
        method, f"{cluster.frontend_url}/api/node{path}", headers=headers, json={}, timeout=10
    )


def _credential_file(cluster: Cluster, name: str) -> Path:
    return cluster.root / name / ".corral-worker" / f"node-credential-{name}.json"


def _register_as(cluster: Cluster, name: str, address: str, node_token: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {cluster.token}"}
    if node_token is not None:
        headers["X-Node-Token"] = node_token
    body = {
        "name": name,
        "address": address,
        "http_address": address.replace(":1", ":2"),
        "token": cluster.token,
        "labels": {"zone": "evil"},
    }
    return httpx.post(f"{cluster.frontend_url}/api/node/register", json=body, headers=headers, timeout=10)


KEPT = ("id", "address", "http_address", "status", "approved", "labels", "model_count", "credential_set")


def test_a_registered_name_cannot_be_taken_over_and_the_victim_keeps_serving(cluster: Cluster) -> None:
    _start_worker(cluster, "victim")
    served = _chat(cluster)
    assert served.status_code == 200, served.text
    before = _node(cluster, "victim")
    assert before["credential_set"] is True and "credential_hash" not in before
    victim_id = before["id"]
    for node_token in (None, "a-guessed-credential"):
        hijack = _register_as(cluster, "victim", "127.0.0.1:1", node_token)
        assert hijack.status_code == 409
        assert hijack.json()["error"]["message"] == (
            f"node name 'victim' is already registered (id {victim_id}) and this registration did not present "
            "its credential (X-Node-Token header, issued at its first registration and kept in the worker's state "
            f"directory); an admin re-keys it with POST /api/nodes/{victim_id}/rekey (its next registration then "
            f"gets a new credential) or removes it with DELETE /api/nodes/{victim_id}"
        )
        assert "node_token" not in hijack.text and "nats_jwt" not in hijack.text
    after = _node(cluster, "victim")
    assert {k: after[k] for k in KEPT} == {k: before[k] for k in KEPT}
    again = _chat(cluster)
    assert again.status_code == 200 and again.headers["X-LocalAI-Node"] == victim_id
    assert (
        again.headers["X-Corral-Replica"] == served.headers["X-Corral-Replica"]
    )  # the same replica, same address


def test_a_node_may_act_only_as_itself(cluster: Cluster) -> None:
    ghost = _register_as(cluster, "ghost", "127.0.0.1:1")
    assert ghost.status_code == 201 and len(ghost.json()["node_token"]) >= 40
    ghost_id, ghost_token = ghost.json()["id"], ghost.json()["node_token"]
    victim = _node(cluster, "victim")
    try:
        for method, path in (
            ("POST", "heartbeat"),
            ("POST", "drain"),
            ("POST", "deregister"),
            ("GET", "models"),
            ("POST", "nats-credentials"),
        ):
            refused = _node_call(cluster, method, f"/{victim['id']}/{path}", ghost_token)
            assert refused.status_code == 403, path
            assert refused.json()["error"]["message"] == (
                f"X-Node-Token is not the credential of node {victim['id']}: a node may act only as itself; if this "
                f"worker lost its credential, an admin re-keys it with POST /api/nodes/{victim['id']}/rekey (its "
                f"next registration then gets a new credential) or removes it with DELETE /api/nodes/{victim['id']}"
            )
        missing = _node_call(cluster, "POST", f"/{victim['id']}/drain", None)
        assert missing.status_code == 401
        assert missing.json()["error"]["message"] == (
            "node credential required: send the X-Node-Token header with the credential this node received at its "
            "first registration"
        )
        assert {k: _node(cluster, "victim")[k] for k in KEPT} == {k: victim[k] for k in KEPT}
        assert _node_call(cluster, "POST", f"/{ghost_id}/heartbeat", ghost_token).status_code == 200
        own = _node_call(cluster, "POST", f"/{victim['id']}/heartbeat", cluster.node_token("victim"))
        assert own.status_code == 200
    finally:
        assert _admin(cluster, "DELETE", f"/api/nodes/{ghost_id}").status_code == 200


def test_a_restarted_worker_registers_as_itself_and_a_lost_credential_needs_an_admin_re_key(
    cluster: Cluster,
) -> None:
    victim_id, token = _node(cluster, "victim")["id"], cluster.node_token("victim")
    path = _credential_file(cluster, "victim")
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    proc = cluster.workers[0]
    os.kill(proc.popen.pid, signal.SIGKILL)
    proc.popen.wait(10)
    cluster.workers.remove(proc)
    restarted = _start_worker(cluster, "victim")
    assert _node(cluster, "victim")["id"] == victim_id and cluster.node_token("victim") == token
    assert _chat(cluster).status_code == 200

    _stop_worker(cluster, restarted)
    path.unlink()  # the worker lost its state
    lost, _base = _spawn_worker(cluster, "victim")
    assert lost.popen.wait(60) != 0
    assert (
        f"refused registration (HTTP 409): node name 'victim' is already registered (id {victim_id})"
        in lost.log()
    )
    assert "Traceback" not in lost.log()
    rekey = _admin(cluster, "POST", f"/api/nodes/{victim_id}/rekey")
    assert rekey.status_code == 200
    assert rekey.json() == {
        "message": "node credential cleared: the next registration as 'victim' receives a new one"
    }
    assert _node(cluster, "victim")["credential_set"] is False
    _start_worker(cluster, "victim")
    assert _node(cluster, "victim")["id"] == victim_id and _node(cluster, "victim")["credential_set"] is True
    assert cluster.node_token("victim") != token
    assert _chat(cluster).status_code == 200


def _stays(cluster: Cluster, status: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert _node(cluster, "victim")["status"] == status
        time.sleep(0.2)


def test_an_admin_drain_holds_across_the_workers_re_registration_resume_and_staleness(
    cluster: Cluster,
) -> None:
    victim_id = _node(cluster, "victim")["id"]
    assert _admin(cluster, "POST", f"/api/nodes/{victim_id}/drain").status_code == 200
    resumed = _node_call(cluster, "POST", f"/{victim_id}/resume", cluster.node_token("victim"))
    assert resumed.status_code == 409
    assert resumed.json()["error"]["message"] == (
        f"node {victim_id} was drained by an admin and stays draining until an admin resumes it "
        f"(POST /api/nodes/{victim_id}/resume)"
    )
    assert _node(cluster, "victim")["status"] == "draining"

    _stop_worker(cluster, cluster.workers[0])  # SIGTERM: it drains itself and deregisters (offline)
    assert _node(cluster, "victim")["status"] == "offline"
    proc = _start_worker(cluster, "victim")  # and registers again
    wait_for(lambda: _node(cluster, "victim")["status"] != "offline", "re-registration", 20)
    _stays(cluster, "draining", 2.0)

    os.kill(proc.popen.pid, signal.SIGSTOP)  # no heartbeats: stale, offline
    try:
        wait_for(lambda: _node(cluster, "victim")["status"] == "offline", "the stale node going offline", 20)
    finally:
        os.kill(proc.popen.pid, signal.SIGCONT)
    wait_for(lambda: _node(cluster, "victim")["status"] != "offline", "the node beating again", 20)
    _stays(cluster, "draining", 2.0)

    resumed = _admin(cluster, "POST", f"/api/nodes/{victim_id}/resume")
    assert resumed.status_code == 200 and _node(cluster, "victim")["status"] == "healthy"
    assert _chat(cluster).status_code == 200
