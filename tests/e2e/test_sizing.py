"""Cluster-aware sizing on a real frontend: nodes of different VRAM, RAM and budgets decide the `cluster`
object of /api/resources and /api/models, each model's verdict, and the variants offered."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.cluster import Cluster

pytestmark = pytest.mark.slow

GIB = 1 << 30


def _sparse_model(models_dir: Path, name: str, size_bytes: int, extra: str = "") -> None:
    with open(models_dir / f"{name}.bin", "wb") as handle:  # sparse: the size is real, the disk use is not
        handle.truncate(size_bytes)
    (models_dir / f"{name}.yaml").write_text(
        f"name: {name}\nbackend: simulator\nparameters:\n  model: {name}.bin\n{extra}"
    )


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = Cluster(root=state_root / "e2e-sizing", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    _sparse_model(c.models_dir, "small", 12 * GIB)
    _sparse_model(c.models_dir, "huge", 40 * GIB)
    _sparse_model(c.models_dir, "cpu-only", 100 * GIB, "node_selector:\n  tier: cpu\n")
    _sparse_model(c.models_dir, "llama3", 4 * GIB)
    _sparse_model(c.models_dir, "llama3-cuda12", 8 * GIB, "variant_of: llama3\ncapability: nvidia-cuda-12\n")
    _sparse_model(c.models_dir, "llama3-metal", 6 * GIB, "variant_of: llama3\ncapability: metal\n")
    (c.models_dir / "production.yaml").write_text("name: production\nalias: llama3\n")
    try:
        c.start_frontend()
        yield c
    finally:
        c.stop()


def _get(c: Cluster, path: str) -> dict[str, Any]:
    response = httpx.get(f"{c.frontend_url}{path}", headers=c.admin_headers, timeout=10)
    assert response.status_code == 200, response.text
    return dict(response.json())


NODE_TOKENS: dict[str, str] = {}  # node name -> the credential its first registration returned


def _register(c: Cluster, name: str, **facts: Any) -> str:
    body = {"name": name, "address": "127.0.0.1:1", "http_address": "127.0.0.1:2", "token": c.token, **facts}
    headers = {"Authorization": f"Bearer {c.token}"}
    if name in NODE_TOKENS:  # registering a known name again needs its own credential
        headers["X-Node-Token"] = NODE_TOKENS[name]
    response = httpx.post(f"{c.frontend_url}/api/node/register", json=body, headers=headers)
    assert response.status_code == 201, response.text
    NODE_TOKENS.setdefault(name, response.json().get("node_token", ""))
    return str(response.json()["id"])


def _models(c: Cluster) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in _get(c, "/api/models")["models"]}


def test_sizing_follows_the_largest_single_node_capped_by_its_budget(cluster: Cluster) -> None:
    c = cluster
    assert httpx.get(f"{c.frontend_url}/api/resources").status_code == 401  # admin only, as the reference
    local = _get(c, "/api/resources")
    assert "cluster" not in local  # no backend node yet: this host is all there is
    assert local["ram"]["total"] > 0 and local["aggregate"]["total_memory"] == local["ram"]["total"]
    small = _models(c)["small"]
    assert small["memory_bytes"] == 12 * GIB
    assert small["fits"] is (local["ram"]["total"] >= 12 * GIB)  # judged against this host
    assert small["verdict"] == "Fits on this host" or small["verdict"].startswith("Too large: needs 12.9 GB")

    _register(c, "cpu-big", total_ram=512 * GIB, available_ram=512 * GIB, labels={"tier": "cpu"})
    assert _get(c, "/api/resources")["cluster"] == {
        "enabled": True,
        "node_id": _get(c, "/api/resources")["cluster"]["node_id"],
        "node_name": "cpu-big",
        "total_memory": 512 * GIB,
        "is_gpu": False,
        "node_count": 1,
    }

    _register(
        c, "gpu-small", total_vram=16 * GIB, available_vram=16 * GIB, total_ram=64 * GIB, gpu_vendor="nvidia"
    )
    cluster_obj = _get(c, "/api/resources")["cluster"]
    assert (cluster_obj["node_name"], cluster_obj["is_gpu"], cluster_obj["total_memory"]) == (
        "gpu-small",
        True,
        16 * GIB,
    )  # a GPU node wins over a CPU node with more RAM

    dgx = _register(
        c,
        "dgx-01",
        total_vram=80 * GIB,
        available_vram=80 * GIB,
        gpu_vendor="nvidia",
        capability="nvidia-cuda-12",
    )
    body = _get(c, "/api/models")
    assert (body["cluster"]["node_name"], body["cluster"]["total_memory"], body["cluster"]["node_count"]) == (
        "dgx-01",
        80 * GIB,
        3,
    )
    assert body["ram_total"] == local["ram"]["total"]  # the aggregate and ram fields stay the frontend's own
    models = {m["name"]: m for m in body["models"]}
    assert (models["huge"]["fits"], models["huge"]["verdict"]) == (True, "Fits on dgx-01")
    assert models["cpu-only"]["verdict"] == "Fits on cpu-big"  # its selector only allows the CPU node
    assert body["aliases"] == {"production": "llama3"}

    budget = httpx.put(
        f"{c.frontend_url}/api/nodes/{dgx}/vram-budget", json={"value": "10GiB"}, headers=c.admin_headers
    )
    assert budget.status_code == 200, budget.text
    models = _models(c)
    assert (
        _get(c, "/api/resources")["cluster"]["node_name"] == "gpu-small"
    )  # the budget caps dgx-01 to 10 GiB
    assert models["small"]["verdict"] == "Fits on gpu-small"
    assert models["huge"] == {
        **models["huge"],
        "fits": False,
        "fits_on": None,
        "verdict": "Too large: needs 42.9 GB, the largest node (gpu-small) offers 17.2 GB",
    }


def test_variants_are_judged_against_the_capabilities_present_in_the_cluster(cluster: Cluster) -> None:
    c = cluster
    _register(
        c,
        "dgx-01",
        total_vram=80 * GIB,
        available_vram=80 * GIB,
        gpu_vendor="nvidia",
        capability="nvidia-cuda-12",
    )
    body = _get(c, "/api/models/variants/production")  # an alias resolves to its model
    assert body["model"] == "llama3" and "nvidia-cuda-12" in body["capabilities"]
    variants = {v["name"]: v for v in body["variants"]}
    assert [v["name"] for v in body["variants"]] == ["llama3", "llama3-cuda12", "llama3-metal"]
    assert variants["llama3-cuda12"]["compatible"] is True  # offered because one worker can run it
    assert variants["llama3-metal"]["compatible"] is False
    assert body["recommended"] == "llama3-cuda12"
    missing = httpx.get(f"{c.frontend_url}/api/models/variants/nope", headers=c.admin_headers)
    assert missing.status_code == 404 and "model 'nope' not found" in missing.json()["error"]["message"]


def test_storage_size_counts_the_model_files(cluster: Cluster) -> None:
    expected = sum(os.stat(p).st_size for p in cluster.models_dir.iterdir())
    assert _get(cluster, "/api/resources")["storage_size"] == expected
