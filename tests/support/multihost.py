"""A cluster spread over network namespaces (support/netns.py): PostgreSQL, NATS, a frontend and two
workers, each a host with its own address on one bridge; the workers share no model directory.

Used by tests/e2e/test_multihost.py and benchmarks/faults.py (the unplugged-host row).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from support.cluster import Proc
from support.fault_clients import (
    CLIENT_TIMEOUT_S,
    StreamResult,
    Traffic,
    chat,
    stream_chat,
    summarize,
    until_served,
)
from support.faults import FRONTEND_WINDOWS, Outcome, load_model_calls, replicas
from support.netns import Network, start_postgres
from support.waiting import wait_for

TOKEN = "multihost-token"
ADMIN_KEY = "multihost-admin-key"
HOSTS = {"pg": 2, "nats": 3, "fe": 10, "w1": 11, "w2": 12}
BASE_PORTS = {"w1": 50051, "w2": 50071}  # distinct, so a backend's port names its replica
SPREAD_MODEL = "everywhere"  # declared `replicas: all`


@dataclass
class MultiHost:
    net: Network
    url: str
    database_url: str
    models_dir: Path
    root: Path
    workers: dict[str, Proc]

    @property
    def admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {ADMIN_KEY}"}

    def ip(self, role: str) -> str:
        return self.net.hosts[role].ip

    def healthy(self) -> list[str]:
        nodes = httpx.get(f"{self.url}/api/nodes", headers=self.admin, timeout=10).json()
        return sorted(n["name"] for n in nodes if n["status"] == "healthy")

    def close(self) -> None:
        self.net.close()


def _wait_http(url: str, proc: Proc, timeout_s: float = 90.0) -> None:
    def ready() -> bool:
        assert proc.popen.poll() is None, f"{proc.name} exited:\n{proc.log()[-3000:]}"
        try:
            return httpx.get(url, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(ready, f"{proc.name} ready at {url}", timeout_s)


def _create_database(pg_base: str) -> str:
    import asyncio

    import asyncpg

    async def create() -> None:
        conn = await asyncpg.connect(f"{pg_base}/postgres", timeout=10)
        try:
            await conn.execute('CREATE DATABASE "corral_multihost"')
        finally:
            await conn.close()

    asyncio.run(create())
    return f"{pg_base}/corral_multihost"


def start_multihost(root: Path, models_dir: Path) -> MultiHost:
    """Create the network and start everything on it; on any failure, tear it all down and re-raise."""
    from corral.up.embedded import find_nats_server

    net = Network()
    try:
        net.create()
        for role, octet in HOSTS.items():
            net.add_host(role, octet)
        database_url = _create_database(start_postgres(net, "pg", root / "pg"))
        nats_url = f"nats://{net.hosts['nats'].ip}:4222"
        net.spawn(
            "nats",
            "nats",
            [
                str(find_nats_server()),
                "-a",
                net.hosts["nats"].ip,
                "-p",
                "4222",
                "-js",
                "-sd",
                str(root / "nats"),
            ],
            root / "logs",
            python=False,
        )
        url = f"http://{net.hosts['fe'].ip}:8080"
        frontend = net.spawn(
            "fe",
            "frontend",
            [
                "run",
                "--address",
                f"{net.hosts['fe'].ip}:8080",
                "--nats-url",
                nats_url,
                "--database-url",
                database_url,
                "--registration-token",
                TOKEN,
                "--auto-approve-nodes",
                "--models-path",
                str(models_dir),
                "--expose-node-header",
                "--reconciler-interval",
                "0.5s",
            ],
            root / "logs",
            env={
                **FRONTEND_WINDOWS,
                "LOCALAI_BOOTSTRAP_ADMIN_KEY": ADMIN_KEY,
                "LOCALAI_MODEL_SCHEDULING": json.dumps([{"model_name": SPREAD_MODEL, "replicas": "all"}]),
            },
        )
        _wait_http(f"{url}/readyz", frontend)
        workers = {}
        for role in ("w1", "w2"):
            ip, base = net.hosts[role].ip, BASE_PORTS[role]
            workers[role] = net.spawn(
                role,
                role,
                [
                    "worker",
                    "--register-to",
                    url,
                    "--nats-url",
                    nats_url,
                    "--registration-token",
                    TOKEN,
                    "--node-name",
                    role,
                    "--serve-addr",
                    f"{ip}:{base}",
                    "--advertise-addr",
                    f"{ip}:{base}",
                    "--http-addr",
                    f"{ip}:{base - 1}",
                    "--models-path",
                    str(root / role / "models"),
                    "--heartbeat-interval",
                    "0.5s",
                    "--log-level",
                    "debug",
                ],
                root / "logs",
            )
        for role, proc in workers.items():
            _wait_http(f"http://{net.hosts[role].ip}:{BASE_PORTS[role] - 1}/readyz", proc)
        cluster = MultiHost(net, url, database_url, models_dir, root, workers)
        wait_for(lambda: cluster.healthy() == ["w1", "w2"], "w1 and w2 registered and healthy", 60)
        return cluster
    except BaseException:
        net.close()
        raise


def spread_on(mh: MultiHost, nodes: list[str]) -> bool:
    return (
        sorted(str(r["node"]) for r in replicas(mh.database_url, SPREAD_MODEL) if r["state"] == "loaded")
        == nodes
    )


def host_unplugged_mid_stream(mh: MultiHost, talker: str) -> Outcome:
    """Delete the veth of the host serving a live stream, under traffic to a model spread on both hosts."""
    wait_for(lambda: spread_on(mh, ["w1", "w2"]), f"a replica of {SPREAD_MODEL} on w1 and w2", 90)
    first = chat(mh.url, talker)
    assert first.ok, first.seen()
    victim = str(replicas(mh.database_url, talker)[0]["node"])
    survivor = ({"w1", "w2"} - {victim}).pop()
    stream = StreamResult()
    reader = threading.Thread(target=stream_chat, args=(mh.url, talker, 2000, stream), daemon=True)
    with Traffic(mh.url, SPREAD_MODEL, concurrency=2, timeout_s=60) as traffic:
        traffic.wait_served(3, "before the cut")
        reader.start()
        wait_for(
            lambda: stream.pieces >= 3 or not reader.is_alive(), f"three streamed chunks of {talker}", 60
        )
        t0 = time.monotonic()
        mh.net.cut(victim)  # packets to and from it vanish: no reset, no FIN
        wait_for(
            lambda: spread_on(mh, [survivor]), f"{victim}'s replica dropped once its heartbeats stop", 60
        )
        traffic.wait_served(5, "after the cut", 90)
        reader.join(CLIENT_TIMEOUT_S + 10)
    after = [r for r in traffic.replies if r.started >= t0]
    recover_s, again = until_served(mh.url, talker, t0)
    slowest = max(r.ended - r.started for r in after)
    saw = (
        f"stream: {stream.seen()} after {stream.elapsed_s:.0f}s; traffic: {summarize(after)}, slowest "
        f"{slowest:.1f}s; {talker} again: {summarize(again)}"
    )
    lost = (stream.finish_reason is None) + sum(not r.ok for r in after) + sum(not r.ok for r in again)
    loads = load_model_calls(mh.workers.values(), talker) - 2
    return Outcome(
        "host unplugged mid-stream (netns)",
        saw,
        recover_s,
        lost,
        loads,
        {"stream": stream, "after": after, "again": again, "victim": victim, "survivor": survivor},
    )
