"""`effective_options_hash` on real processes: the hash of the options each replica's backend was loaded
with, node defaults included — the spec's troubleshooting step for "an old context size or another old load
option" compares it across the nodes that host a model."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from support.cluster import Cluster
from support.faults import loaded_on, write_sim_model
from support.waiting import wait_for

pytestmark = pytest.mark.slow

WORKERS = {"one-a": "1", "one-b": "1", "two": "2"}  # node name → its --threads default
MIB = 1 << 20


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = Cluster(root=state_root / "e2e-effective-options", database_url=make_database(), nats_url=nats_url)
    write_sim_model(
        c.models_dir, "spread", file_bytes=MIB
    )  # a file: staged under each worker's own directory
    write_sim_model(c.models_dir, "pinned", file_bytes=MIB)
    with open(c.models_dir / "pinned.yaml", "a") as config:
        config.write("threads: 3\n")  # the model's own value: no node default applies
    try:
        c.start_frontend("--reconciler-interval", "0.5s")
        for name, threads in WORKERS.items():
            c.start_worker(name, "--threads", threads)
        yield c
    finally:
        c.stop()


def _hashes(c: Cluster, model: str) -> dict[str, str]:
    """Node name → effective_options_hash of its replica of `model`, as GET /api/nodes/<id>/models shows it."""
    nodes = httpx.get(f"{c.frontend_url}/api/nodes", headers=c.admin_headers, timeout=10).json()
    found: dict[str, str] = {}
    for node in nodes:
        rows = httpx.get(
            f"{c.frontend_url}/api/nodes/{node['id']}/models", headers=c.admin_headers, timeout=10
        )
        for row in rows.json():
            if row["model_name"] == model:
                found[node["name"]] = row["effective_options_hash"]
    return found


def _spread(c: Cluster, model: str) -> dict[str, str]:
    rule = httpx.post(
        f"{c.frontend_url}/api/nodes/scheduling",
        json={"model_name": model, "replicas": "all"},
        headers=c.admin_headers,
        timeout=10,
    )
    assert rule.status_code == 200, rule.text
    wait_for(lambda: loaded_on(c.database_url, model) == sorted(WORKERS), f"{model} loaded on every node", 90)
    hashes = _hashes(c, model)
    assert all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes.values()), hashes
    return hashes


def test_nodes_with_different_defaults_show_different_hashes_and_the_same_defaults_the_same(
    cluster: Cluster,
) -> None:
    hashes = _spread(cluster, "spread")
    assert hashes["one-a"] == hashes["one-b"]  # same defaults, each worker its own models directory
    assert hashes["two"] != hashes["one-a"]  # its backend was loaded with Threads=2, not 1


def test_a_value_the_model_sets_itself_makes_every_node_load_it_the_same(cluster: Cluster) -> None:
    hashes = _spread(cluster, "pinned")
    assert len(set(hashes.values())) == 1, hashes
    assert hashes["one-a"] not in _hashes(cluster, "spread").values()
