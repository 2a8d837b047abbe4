"""Node lifecycle on real processes: approval, stale/pending, admin delete, labels, readiness, drain."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.cluster import Cluster, free_port_pair, spawn, wait_http
from support.processes import backend_pid
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
    c = Cluster(
        root=state_root / "e2e-node-lifecycle",
        database_url=make_database(),
        nats_url=nats_url,
        auto_approve=False,
    )
    c.models_dir.mkdir(parents=True, exist_ok=True)
    (c.models_dir / "sim.yaml").write_text("name: sim\nbackend: simulator\nparameters:\n  model: sim\n")
    (c.models_dir / "sim-approved.yaml").write_text(
        "name: sim-approved\nbackend: simulator\nparameters:\n  model: sim-approved\n"
    )
    (c.models_dir / "slow.yaml").write_text(
        "name: slow\nbackend: simulator\nparameters:\n  model: slow\noptions:\n  - output_token_time_s:0.2\n"
    )
    (c.models_dir / "coldstart.yaml").write_text(
        "name: coldstart\nbackend: simulator\nparameters:\n  model: coldstart\noptions:\n  - load_time_s:2\n"
    )
    for variant, needs in (("sim-cuda12", "nvidia-cuda-12"), ("sim-metal", "metal")):
        (c.models_dir / f"{variant}.yaml").write_text(
            f"name: {variant}\nbackend: simulator\nvariant_of: sim\n"
            f"capability: {needs}\nparameters:\n  model: {variant}\n"
        )
    try:
        c.start_frontend(*FAST_HEALTH)
        yield c
    finally:
        c.stop()


def _admin(cluster: Cluster, method: str, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.request(
        method, f"{cluster.frontend_url}{path}", headers=cluster.admin_headers, timeout=30, **kwargs
    )


def _find_node(cluster: Cluster, name: str) -> dict[str, Any] | None:
    return next((n for n in _admin(cluster, "GET", "/api/nodes").json() if n["name"] == name), None)


def _node(cluster: Cluster, name: str) -> dict[str, Any]:
    node = _find_node(cluster, name)
    assert node is not None, f"node {name} is not listed"
    return node


def _wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    wait_for(predicate, what, timeout_s)


def _chat(cluster: Cluster, model: str, max_tokens: int = 3) -> httpx.Response:
    return httpx.post(
        f"{cluster.frontend_url}/v1/chat/completions",
        timeout=60,
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens},
    )


def _start_worker(cluster: Cluster, name: str, env: dict[str, str] | None = None) -> tuple[Any, int]:
    base = free_port_pair()
    proc = spawn(
        name,
        [*cluster.worker_argv(name, base), "--heartbeat-interval", "0.5s"],
        cluster.root / "logs",
        env=env,
    )
    wait_http(f"http://127.0.0.1:{base - 1}/readyz", proc)
    cluster.workers.append(proc)
    cluster.worker_ports.append(base)
    return proc, base


def test_a_pending_node_stays_pending_through_stale_and_back_and_is_never_routed(cluster: Cluster) -> None:
    proc, _base = _start_worker(cluster, "w-pending")
    _wait_for(lambda: _find_node(cluster, "w-pending") is not None, "registration")
    assert _node(cluster, "w-pending")["status"] == "pending"
    assert _chat(cluster, "sim").status_code != 200  # the only node is pending: nothing may be placed on it
    os.kill(proc.popen.pid, signal.SIGSTOP)  # no heartbeats
    try:
        _wait_for(
            lambda: _node(cluster, "w-pending")["status"] == "offline", "stale pending node goes offline"
        )
    finally:
        os.kill(proc.popen.pid, signal.SIGCONT)
    _wait_for(lambda: _node(cluster, "w-pending")["status"] == "pending", "it comes back")
    for _ in range(10):  # and stays pending, whatever its heartbeats do
        assert _node(cluster, "w-pending")["status"] == "pending"
        time.sleep(0.2)
    assert _chat(cluster, "sim").status_code != 200
    node = _node(cluster, "w-pending")
    assert node["model_count"] == 0
    approved = _admin(cluster, "POST", f"/api/nodes/{node['id']}/approve")
    assert approved.status_code == 200 and approved.json()["status"] == "healthy"
    assert _admin(cluster, "POST", f"/api/nodes/{node['id']}/approve").status_code == 400
    # the refused loads above may leave a short failure cooldown on "sim"; a fresh model lands at once
    assert _chat(cluster, "sim-approved").status_code == 200


def test_labels_are_automatic_and_managed_through_the_admin_api(cluster: Cluster, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho '24576, 20000'\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    proc, _ = _start_worker(
        cluster,
        "w-gpu",
        env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "LOCALAI_NODE_LABELS": "zone=a,tier=gpu"},
    )
    _wait_for(lambda: _find_node(cluster, "w-gpu") is not None, "registration")
    node = _node(cluster, "w-gpu")
    assert node["total_vram"] == 24576 << 20 and node["gpu_vendor"] == "nvidia"
    base = f"/api/nodes/{node['id']}"
    labels = _admin(cluster, "GET", f"{base}/labels").json()
    assert labels == {
        "gpu.vendor": "nvidia",
        "gpu.vram": "24GB",
        "node.name": "w-gpu",
        "node.replica-slots": "1",
        "tier": "gpu",
        "zone": "a",
    }
    assert _admin(cluster, "PATCH", f"{base}/labels", json={"zone": "b", "rack": "7"}).json()["zone"] == "b"
    assert _admin(cluster, "DELETE", f"{base}/labels/rack").status_code == 204
    assert _admin(cluster, "PUT", f"{base}/labels", json={"only": "this"}).json() == {"only": "this"}
    assert _admin(cluster, "GET", f"{base}/labels").json() == {"only": "this"}
    bad = _admin(cluster, "PUT", f"{base}/labels", json={"k": 5})
    assert bad.status_code == 400 and "'k'" in bad.json()["error"]["message"]
    assert _admin(cluster, "PUT", f"{base}/max-replicas-per-model", json={"value": 3}).json() == {
        "max_replicas_per_model": 3
    }
    assert _admin(cluster, "PUT", f"{base}/max-replicas-per-model", json={"value": 0}).status_code == 400
    assert _admin(cluster, "DELETE", f"{base}/max-replicas-per-model").json() == {"reset": True}
    assert _admin(cluster, "GET", "/api/nodes/00000000-0000-4000-8000-000000000000/labels").status_code == 404
    cluster.workers.remove(proc)
    assert proc.stop() == 0


def test_a_worker_reports_its_cuda_capability_and_variants_are_judged_against_it(
    cluster: Cluster, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(  # the memory query, else the banner naming the CUDA version
        '#!/bin/sh\ncase "$1" in --query-gpu=*) echo "24576, 20000" ;;\n'
        '*) echo "| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4 |" ;; esac\n'
    )
    (bin_dir / "nvidia-smi").chmod(0o755)
    proc, _ = _start_worker(cluster, "w-cuda", env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    _wait_for(lambda: _find_node(cluster, "w-cuda") is not None, "registration")
    node = _node(cluster, "w-cuda")
    assert node["capability"] == "nvidia-cuda-12" and node["gpu_vendor"] == "nvidia"
    assert _admin(cluster, "POST", f"/api/nodes/{node['id']}/approve").status_code == 200
    body = _admin(cluster, "GET", "/api/models/variants/sim").json()
    assert "nvidia-cuda-12" in body["capabilities"], body
    compatible = {v["name"]: v["compatible"] for v in body["variants"]}
    assert compatible == {"sim": True, "sim-cuda12": True, "sim-metal": False}
    assert body["recommended"] == "sim-cuda12"
    cluster.workers.remove(proc)
    assert proc.stop() == 0


def test_an_admin_deleted_node_registers_again_by_itself_and_serves(cluster: Cluster) -> None:
    old = _node(cluster, "w-pending")
    assert old is not None and old["status"] == "healthy"
    assert _admin(cluster, "DELETE", f"/api/nodes/{old['id']}").json() == {"message": "node deregistered"}
    _wait_for(
        lambda: (_find_node(cluster, "w-pending") or {}).get("id") not in (None, old["id"]), "re-registration"
    )
    new = _node(cluster, "w-pending")
    assert new["status"] == "pending"  # a deleted node is a new node: it needs approval again
    assert _admin(cluster, "POST", f"/api/nodes/{new['id']}/approve").status_code == 200
    reply = _chat(cluster, "sim-approved")
    assert reply.status_code == 200, reply.text  # NATS handlers answer under the new id


def test_readyz_skips_cold_starts_and_flips_when_a_serving_backend_is_killed(cluster: Cluster) -> None:
    ready = f"http://127.0.0.1:{cluster.worker_ports[0] - 1}/readyz"
    codes: list[int] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            codes.append(httpx.get(ready).status_code)
            time.sleep(0.05)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        assert _chat(cluster, "coldstart").status_code == 200  # backend start + a 2 s LoadModel
    finally:
        done.set()
        poller.join()
    assert codes and set(codes) == {200}
    node = _node(cluster, "w-pending")
    rows = _admin(cluster, "GET", f"/api/nodes/{node['id']}/models").json()
    port = next(r["address"] for r in rows if r["model_name"] == "coldstart").rpartition(":")[2]
    pid = backend_pid(port, cluster.workers)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    _wait_for(lambda: httpx.get(ready).status_code == 503, "readyz 503 after the backend died")
    assert "backend coldstart#0" in httpx.get(ready).text
    assert _chat(cluster, "coldstart").status_code == 200  # the next request reloads it
    _wait_for(lambda: httpx.get(ready).status_code == 200, "readyz back to 200")


def test_metrics_export_the_oldest_xmin_age_gauge(cluster: Cluster) -> None:
    def has_gauge() -> bool:
        return "localai_control_plane_oldest_xmin_age" in httpx.get(f"{cluster.frontend_url}/metrics").text

    _wait_for(has_gauge, "the xmin gauge")


def test_sigterm_drains_waits_for_in_flight_work_deregisters_and_exits_zero(cluster: Cluster) -> None:
    proc = cluster.workers[0]
    assert _chat(cluster, "slow", max_tokens=1).status_code == 200  # loaded on the only healthy node
    result: dict[str, httpx.Response] = {}
    thread = threading.Thread(target=lambda: result.setdefault("r", _chat(cluster, "slow", max_tokens=15)))
    thread.start()
    time.sleep(1.0)  # the 3 s request is in flight
    proc.popen.send_signal(signal.SIGTERM)
    thread.join(30)
    assert result["r"].status_code == 200 and result["r"].json()["usage"]["completion_tokens"] == 15
    assert proc.popen.wait(30) == 0
    node = _node(cluster, "w-pending")
    assert node["status"] == "offline" and node["model_count"] == 0
    assert "Traceback" not in proc.log()
