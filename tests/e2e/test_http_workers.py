"""`corral run --http-workers 2`: two full frontend processes serve one port and both answer requests."""

from __future__ import annotations

import http.client
import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.cluster import Cluster
from support.waiting import wait_for

pytestmark = pytest.mark.slow

CONNECTIONS = 16  # the kernel spreads connections by hash: all 16 on one process would be a 2^-15 chance
ESTABLISHED, LISTENING = "01", "0A"
CHAT = {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = Cluster(root=state_root / "e2e-http-workers", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    (c.models_dir / "sim.yaml").write_text("name: sim\nbackend: simulator\nparameters:\n  model: sim\n")
    try:
        c.start_frontend("--http-workers", "2")
        c.start_worker("w1")
        yield c
    finally:
        c.stop()


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _sockets(pid: int, port: int, state: str) -> int:
    """TCP sockets on local `port` in `state` (01 established, 0A listening) that process `pid` holds."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == state:
                inodes.add(fields[9])
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}").removeprefix("socket:[").rstrip("]") in inodes
        except OSError:
            pass
    return count


def _chat(conn: http.client.HTTPConnection) -> dict[str, Any]:
    conn.request(
        "POST", "/v1/chat/completions", body=json.dumps(CHAT), headers={"Content-Type": "application/json"}
    )
    response = conn.getresponse()
    body = response.read()
    assert response.status == 200, body
    reply: dict[str, Any] = json.loads(body)
    return reply


def test_two_frontend_processes_share_the_port_and_both_serve_inference(cluster: Cluster) -> None:
    assert cluster.frontend is not None
    host, port = cluster.frontend_url.removeprefix("http://").split(":")
    supervisor = cluster.frontend.popen.pid
    wait_for(lambda: len(_children(supervisor)) == 2, "both frontend processes started", timeout_s=60)
    children = _children(supervisor)
    wait_for(
        lambda: all(_sockets(pid, int(port), LISTENING) for pid in children),
        "both frontend processes listening on the port",
        timeout_s=60,
    )
    first = http.client.HTTPConnection(host, int(port), timeout=60)
    _chat(first)  # the cold load, once for the cluster
    first.close()
    before = {pid: _sockets(pid, int(port), ESTABLISHED) for pid in children}  # e.g. the worker's heartbeats
    conns = [http.client.HTTPConnection(host, int(port), timeout=60) for _ in range(CONNECTIONS)]
    try:
        replies = [
            _chat(conn) for conn in conns
        ]  # a keep-alive connection stays on the process that accepted it
        served = {pid: _sockets(pid, int(port), ESTABLISHED) - before[pid] for pid in children}
    finally:
        for conn in conns:
            conn.close()

    assert all(r["choices"][0]["message"]["content"] for r in replies)
    assert all(n > 0 for n in served.values()), served


def test_each_frontend_process_exports_its_event_loop_stall_counter(cluster: Cluster) -> None:
    text = httpx.get(f"{cluster.frontend_url}/metrics", timeout=10).text

    assert re.search(r'^corral_event_loop_stalls_total\{process="frontend"\} \d+\.0$', text, re.MULTILINE)


def test_stopping_the_supervisor_stops_every_frontend_process(cluster: Cluster) -> None:
    assert cluster.frontend is not None
    children = _children(cluster.frontend.popen.pid)
    cluster.frontend.stop()

    assert cluster.frontend.popen.returncode == 0
    assert not [pid for pid in children if Path(f"/proc/{pid}").exists()]
