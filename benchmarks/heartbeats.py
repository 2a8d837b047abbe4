"""Heartbeat write rate: 1,000 simulated nodes beating against one real frontend (`corral run`).

Two runs on the same frontend build, each with a fresh database:
  * checkpointed — the default rules (timestamp-only beats held for --node-heartbeat-checkpoint);
  * baseline     — LOCALAI_NODE_HEARTBEAT_CHECKPOINT below the beat interval: one write per beat.

Time is compressed by COMPRESSION so a run takes about a minute: beats every 10 s / k,
checkpoint 60 s / k. After a warm-up (every node's first beat is written by rule), durable
writes are counted by an insert-only trigger on `backend_nodes` UPDATEs and the frontend's CPU
is read from /proc/<pid>/stat. Figures are scaled back to real time per node per hour; the
ratio is writes per beat, checkpointed over one-write-per-beat. Beats go over a small raw
HTTP/1.1 keep-alive pool, so the load generator is not what limits the rate. The driver also holds
every node's NATS presence (one connection subscribed to `nodes.<id>.>` for each node, as workers
are) and counts what the frontend sends them. Frontend CPU is reported per real hour as well.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

import asyncpg
import httpx
import nats
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from corral.runtime.processes import port_open
from support.cluster import Cluster

NODES = 1000
BEAT_INTERVAL_S = 10.0
CHECKPOINT_S = 60.0
COMPRESSION = 3.0  # 10 s beats → every 3.3 s; 60 s checkpoint → 20 s
WARMUP_S = 25.0  # first beats after start are written by rule; measure the steady state after them
RUN_S = 60.0
CONNECTIONS = 32
GIB = 1 << 30
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
TRIGGER_SQL = [
    "CREATE TABLE bench_updates (at timestamptz DEFAULT now())",
    "CREATE FUNCTION bench_count() RETURNS trigger AS $$ BEGIN INSERT INTO bench_updates DEFAULT VALUES; "
    "RETURN NEW; END $$ LANGUAGE plpgsql",
    "CREATE TRIGGER bench_count AFTER UPDATE ON backend_nodes FOR EACH ROW EXECUTE FUNCTION bench_count()",
]


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class RawPool:
    """Keep-alive HTTP/1.1 connections for tiny JSON POSTs (far cheaper per request than httpx)."""

    def __init__(self, host: str, port: int, token: str) -> None:
        self.host, self.port, self.token = host, port, token
        self._free: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()

    async def open(self, count: int) -> None:
        for _ in range(count):
            self._free.put_nowait(await asyncio.open_connection(self.host, self.port))

    async def post(self, path: str, body: bytes, node_token: str) -> int:
        reader, writer = await self._free.get()
        try:
            writer.write(
                f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {self.token}\r\n"
                f"X-Node-Token: {node_token}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            status = int((await reader.readline()).split()[1])
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            return status
        finally:
            self._free.put_nowait((reader, writer))

    async def close(self) -> None:
        while not self._free.empty():
            _reader, writer = self._free.get_nowait()
            writer.close()


async def _node_loop(
    pool: RawPool,
    node: tuple[str, str],
    interval_s: float,
    stop_at: float,
    counted_from: float,
    beats: list[int],
) -> None:
    node_id, node_token = node
    await asyncio.sleep(random.uniform(0, interval_s))
    ram = 16 * GIB
    while time.monotonic() < stop_at:
        ram += random.randint(-8 << 20, 8 << 20)  # a slow drift: crosses 256 MiB only now and then
        body = orjson.dumps({"available_ram": ram, "total_disk": 500 * GIB, "available_disk": 200 * GIB})
        status = await pool.post(f"/api/node/{node_id}/heartbeat", body, node_token)
        assert status == 200, f"heartbeat answered HTTP {status}"
        if time.monotonic() >= counted_from:
            beats[0] += 1
        await asyncio.sleep(interval_s)


async def _count_from(db: asyncpg.Connection, pid: int, delay_s: float, out: dict[str, float]) -> None:
    """After the warm-up: start the write and CPU counters."""
    await asyncio.sleep(delay_s)
    await db.execute("TRUNCATE bench_updates")
    out["cpu_before"] = _cpu_s(pid)


async def _run(label: str, checkpoint_s: float) -> dict[str, float]:
    name = f"corral_bench_hb_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(PG_ADMIN)
    await admin.execute(f'CREATE DATABASE "{name}"')
    url = f"postgresql://postgres@127.0.0.1:5432/{name}"
    root = Path(tempfile.mkdtemp(prefix="corral-bench-hb-", dir="/var/tmp"))
    cluster = Cluster(
        root=root, database_url=url, nats_url="nats://127.0.0.1:4222", fail_on_loop_stalls=False
    )
    (root / "frontend-models").mkdir(parents=True)
    try:
        cluster.start_frontend("--node-heartbeat-checkpoint", f"{checkpoint_s}s", "--log-level", "warning")
        assert cluster.frontend is not None
        headers = {"Authorization": f"Bearer {cluster.token}"}
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        async with httpx.AsyncClient(
            base_url=cluster.frontend_url, headers=headers, limits=limits, timeout=30
        ) as client:
            ids = []
            for i in range(NODES):
                reply = await client.post(
                    "/api/node/register",
                    json={
                        "name": f"bench-{i:04d}",
                        "address": f"10.0.{i // 250}.{i % 250}:50051",
                        "token": cluster.token,
                    },
                )
                ids.append((reply.json()["id"], reply.json()["node_token"]))
            db = await asyncpg.connect(url)
            for sql in TRIGGER_SQL:
                await db.execute(sql)
        nc = await nats.connect(cluster.nats_url, name="bench-nodes")
        node_messages = [0]

        async def on_node_message(_msg: object) -> None:
            node_messages[0] += 1

        for node_id, _node_token in ids:
            await nc.subscribe(f"nodes.{node_id}.>", cb=on_node_message)
        await nc.flush()
        interval_s = BEAT_INTERVAL_S / COMPRESSION
        pid, beats, marks = cluster.frontend.popen.pid, [0], {}
        pool = RawPool("127.0.0.1", int(cluster.frontend_url.rsplit(":", 1)[1]), cluster.token)
        await pool.open(CONNECTIONS)
        start = time.monotonic()
        stop_at, counted_from = start + WARMUP_S + RUN_S, start + WARMUP_S
        await asyncio.gather(
            _count_from(db, pid, WARMUP_S, marks),
            *(_node_loop(pool, n, interval_s, stop_at, counted_from, beats) for n in ids),
        )
        cpu_s = _cpu_s(pid) - marks["cpu_before"]
        writes = int(await db.fetchval("SELECT count(*) FROM bench_updates"))
        await db.close()
        await pool.close()
        await nc.drain()
        simulated_hours = RUN_S * COMPRESSION / 3600
        result = {
            "beats": beats[0],
            "writes": writes,
            "writes_per_node_hour": writes / NODES / simulated_hours,
            "beats_per_node_hour": beats[0] / NODES / simulated_hours,
            "cpu_percent": 100 * cpu_s / RUN_S,
            "cpu_s_per_hour": cpu_s / simulated_hours,
            "writes_per_hour": writes / simulated_hours,
        }
        print(
            f"{label:>12}: {beats[0]} beats, {writes} durable writes -> "
            f"{result['writes_per_node_hour']:.1f} writes/node/hour "
            f"({result['beats_per_node_hour']:.0f} beats/node/hour); frontend CPU {result['cpu_percent']:.0f}% "
            f"of one core at {beats[0] / RUN_S:.0f} beats/s",
            flush=True,
        )
        print(
            f"{'':>12}  per real hour for {NODES} nodes at {BEAT_INTERVAL_S:g} s beats: "
            f"{result['writes_per_hour']:.0f} PostgreSQL writes, {result['cpu_s_per_hour']:.0f} frontend CPU "
            f"seconds ({result['cpu_s_per_hour'] / 36:.1f}% of a core); "
            f"{node_messages[0]} NATS messages to the nodes during the run",
            flush=True,
        )
        return result
    finally:
        cluster.stop()
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def main() -> None:
    if not (port_open("127.0.0.1", 5432) and port_open("127.0.0.1", 4222)):
        raise SystemExit("this benchmark needs PostgreSQL on 127.0.0.1:5432 and NATS on 127.0.0.1:4222")
    print(
        f"{NODES} nodes, beat every {BEAT_INTERVAL_S:g}s, checkpoint {CHECKPOINT_S:g}s, "
        f"time compressed x{COMPRESSION:g} ({RUN_S:g}s per run = {RUN_S * COMPRESSION / 60:g} simulated min)"
    )
    checkpointed = await _run("checkpointed", CHECKPOINT_S / COMPRESSION)
    baseline = await _run("per-beat", 0.1)  # below the beat interval: one durable write per beat
    ratio = (checkpointed["writes"] / max(1, checkpointed["beats"])) / (
        baseline["writes"] / max(1, baseline["beats"])
    )
    print(
        f"durable writes per beat: checkpointed / one-write-per-beat = {ratio:.3f} "
        f"({1 / max(ratio, 1e-9):.1f}x fewer); frontend CPU {checkpointed['cpu_percent']:.0f}% vs "
        f"{baseline['cpu_percent']:.0f}%"
    )


if __name__ == "__main__":
    asyncio.run(main())
