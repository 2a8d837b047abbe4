"""A control plane that verifies (issue 10 item 5): NATS messages are hints, names are names.

Real frontend, worker, simulator backends, PostgreSQL and NATS. The "attacker" is the test's own
NATS client, publishing on the frontends' subjects like any process on the bus could.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from support.cluster import Cluster

pytestmark = pytest.mark.slow

MODELS = ("steady", "fresh", "target")


class Trap:
    """A TCP listener at a bogus replica address: counts every connection anyone makes to it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = Cluster(root=state_root / "e2e-control-trust", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    for name in MODELS:
        (c.models_dir / f"{name}.yaml").write_text(
            f"name: {name}\nbackend: simulator\ncontext_size: 512\nparameters:\n  model: {name}\n"
        )
    try:
        c.start_frontend("--expose-node-header")
        c.start_worker("w1")
        yield c
    finally:
        c.stop()


def _chat(url: str, model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)


async def _publish_and_wait_handled(nc: Client, subject: str, body: dict[str, object]) -> None:
    """Publish a message carrying a fresh mark; return once the frontend reports the mark as applied."""
    mark = uuid.uuid4().hex
    acked = asyncio.Event()

    async def on_report(msg: Msg) -> None:
        if mark in json.loads(msg.data).get("acks", []):
            acked.set()

    sub = await nc.subscribe("corral.inflight", cb=on_report)
    try:
        await nc.publish(subject, json.dumps({**body, "mark": mark}).encode())
        await asyncio.wait_for(acked.wait(), 30)
    finally:
        await sub.unsubscribe()


async def test_a_forged_loaded_event_never_makes_the_frontend_call_its_address(cluster: Cluster) -> None:
    warm = _chat(cluster.frontend_url, "steady")
    assert warm.status_code == 200, warm.text
    node_id = warm.headers["X-LocalAI-Node"]
    trap = Trap()
    nc = await nats.connect(cluster.nats_url)
    try:
        for model, index in (
            ("steady", 0),
            ("steady", 7),
            ("fresh", 0),
        ):  # an existing replica's key, a new one
            await _publish_and_wait_handled(
                nc,
                "corral.replicas",
                {
                    "op": "loaded",
                    "model": model,
                    "node_id": node_id,
                    "node_name": "w1",
                    "replica_index": index,
                    "address": trap.address,
                },
            )
        replies = [
            await asyncio.to_thread(_chat, cluster.frontend_url, m) for m in ("steady", "fresh", "steady")
        ]
    finally:
        await nc.close()
        trap.close()
    assert [r.status_code for r in replies] == [200, 200, 200], [r.text for r in replies]
    assert all(trap.address not in r.headers["X-Corral-Replica"] for r in replies)
    assert trap.connections == 0


async def test_a_forged_alias_invalidation_writes_no_file_and_changes_no_alias(cluster: Cluster) -> None:
    outside = cluster.models_dir.parent / "escaped.yaml"
    nc = await nats.connect(cluster.nats_url)
    try:
        for element in ("../escaped", "forged-alias", "steady"):
            await _publish_and_wait_handled(
                nc,
                "cache.invalidate.models",
                {"element": element, "op": "alias", "config_revision": "target"},
            )
        await _publish_and_wait_handled(
            nc, "cache.invalidate.models", {"element": "steady", "op": "delete", "config_revision": ""}
        )
    finally:
        await nc.close()
    assert not outside.exists()
    assert sorted(p.name for p in cluster.models_dir.iterdir()) == [f"{m}.yaml" for m in sorted(MODELS)]
    assert "name: steady\nbackend: simulator" in (cluster.models_dir / "steady.yaml").read_text()
    assert _chat(cluster.frontend_url, "forged-alias").status_code == 404
    assert _chat(cluster.frontend_url, "steady").status_code == 200  # a forged delete forgot nothing


def test_a_real_alias_edit_still_reaches_the_frontend_through_postgresql(cluster: Cluster) -> None:
    reply = httpx.put(
        f"{cluster.frontend_url}/api/model-configs/prod",
        content=b"name: prod\nalias: target\n",
        headers=cluster.admin_headers,
    )
    assert reply.status_code == 200, reply.text
    assert _chat(cluster.frontend_url, "prod").status_code == 200
    assert (cluster.models_dir / "prod.yaml").read_text() == "name: prod\nalias: target\n"


LONG = "n" * 300


@pytest.mark.parametrize(
    "new_name, problem",
    [
        ("../escaped", "'../escaped' must not contain '/' or '\\' (a name, not a path)"),
        ("sub/dir", "'sub/dir' must not contain '/' or '\\' (a name, not a path)"),
        ("a..b", "'a..b' must not contain '..'"),
        (LONG, f"must be at most 255 characters, got 300 ('{'n' * 64}…')"),
    ],
)
def test_a_rename_to_a_path_or_an_overlong_name_is_refused_naming_the_field(
    cluster: Cluster, new_name: str, problem: str
) -> None:
    reply = httpx.post(
        f"{cluster.frontend_url}/api/model-configs/fresh/rename",
        json={"name": new_name},
        headers=cluster.admin_headers,
    )
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"] == {
        "message": f"field 'name' {problem}",
        "type": "invalid_request_error",
        "code": "invalid_value",
        "param": "name",
    }
    assert not (cluster.models_dir.parent / "escaped.yaml").exists()
    assert (cluster.models_dir / "fresh.yaml").exists()


@pytest.mark.parametrize(
    "path, body, param, message",
    [
        (
            ".hidden",
            b"name: .hidden\nbackend: simulator\n",
            "name",
            "field 'name' '.hidden' must not start with '.'",
        ),
        (
            LONG,
            f"name: {LONG}\nbackend: simulator\n".encode(),
            "name",  # the path parameter's bound answers first
            "invalid request: field 'name': String should have at most 255 characters",
        ),
        (
            "prod2",
            b"name: prod2\nalias: ../target\n",
            "alias",
            "prod2.yaml: field 'alias' '../target' must not contain '/' or '\\' (a name, not a path)",
        ),
    ],
)
def test_a_config_put_under_an_invalid_name_is_refused_naming_the_field(
    cluster: Cluster, path: str, body: bytes, param: str, message: str
) -> None:
    reply = httpx.put(
        f"{cluster.frontend_url}/api/model-configs/{path}", content=body, headers=cluster.admin_headers
    )
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert (error["param"], error["message"]) == (param, message)


@pytest.mark.parametrize("model_name", ["../steady", LONG])
def test_a_scheduling_rule_for_an_invalid_name_is_refused_naming_model_name(
    cluster: Cluster, model_name: str
) -> None:
    reply = httpx.post(
        f"{cluster.frontend_url}/api/nodes/scheduling",
        json={"model_name": model_name},
        headers=cluster.admin_headers,
    )
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == "model_name"
