"""Heartbeat write rate: 1,000 simulated nodes beating against one real frontend (`corral run`).

Two runs on the same frontend build, each with a fresh database:
  * checkpointed — the default rules (timestamp-only beats held for --node-heartbeat-checkpoint);
  * baseline     — LOCALAI_NODE_HEARTBEAT_CHECKPOINT below the beat interval: one write per beat.

Time is compressed by COMPRESSION so a run takes a minute: beats every 10 s / k, checkpoint
60 s / k. Durable writes are counted by an insert-only trigger on `backend_nodes` UPDATEs;
the frontend's CPU from /proc/<pid>/stat. Figures are scaled back to real time per node per
hour, and the ratio against one write per beat is printed.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.cluster import Cluster  # noqa: E402

from corral.embedded import port_open  # noqa: E402

NODES = 1000
BEAT_INTERVAL_S = 10.0
CHECKPOINT_S = 60.0
COMPRESSION = 5.0  # 10 s beats → every 2 s; 60 s checkpoint → 12 s
RUN_S = 60.0
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


async def _node_loop(client: httpx.AsyncClient, node_id: str, interval_s: float, stop_at: float,
                     beats: list[int]) -> None:
    await asyncio.sleep(random.uniform(0, interval_s))
    ram = 16 * GIB
    while time.monotonic() < stop_at:
        ram += random.randint(-8 << 20, 8 << 20)  # a slow drift: crosses 256 MiB only now and then
        body = {"available_ram": ram, "total_disk": 500 * GIB, "available_disk": 200 * GIB}
        await client.post(f"/api/node/{node_id}/heartbeat", json=body)
        beats[0] += 1
        await asyncio.sleep(interval_s)


async def _run(label: str, checkpoint_s: float) -> dict[str, float]:
    name = f"corral_bench_hb_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(PG_ADMIN)
    await admin.execute(f'CREATE DATABASE "{name}"')
    url = f"postgresql://postgres@127.0.0.1:5432/{name}"
    root = Path(tempfile.mkdtemp(prefix="corral-bench-hb-", dir="/var/tmp"))
    cluster = Cluster(root=root, database_url=url, nats_url="nats://127.0.0.1:4222")
    (root / "frontend-models").mkdir(parents=True)
    try:
        cluster.start_frontend("--node-heartbeat-checkpoint", f"{checkpoint_s}s", "--log-level", "warning")
        assert cluster.frontend is not None
        headers = {"Authorization": f"Bearer {cluster.token}"}
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        async with httpx.AsyncClient(base_url=cluster.frontend_url, headers=headers, limits=limits,
                                     timeout=30) as client:
            ids = []
            for i in range(NODES):
                reply = await client.post("/api/node/register", json={
                    "name": f"bench-{i:04d}", "address": f"10.0.{i // 250}.{i % 250}:50051", "token": cluster.token})
                ids.append(reply.json()["id"])
            db = await asyncpg.connect(url)
            for sql in TRIGGER_SQL:
                await db.execute(sql)
            interval_s = BEAT_INTERVAL_S / COMPRESSION
            cpu_before, beats = _cpu_s(cluster.frontend.popen.pid), [0]
            stop_at = time.monotonic() + RUN_S
            await asyncio.gather(*(_node_loop(client, n, interval_s, stop_at, beats) for n in ids))
            cpu_s = _cpu_s(cluster.frontend.popen.pid) - cpu_before
            writes = int(await db.fetchval("SELECT count(*) FROM bench_updates"))
            await db.close()
        simulated_hours = RUN_S * COMPRESSION / 3600
        result = {"beats": beats[0], "writes": writes, "writes_per_node_hour": writes / NODES / simulated_hours,
                  "beats_per_node_hour": beats[0] / NODES / simulated_hours, "cpu_percent": 100 * cpu_s / RUN_S}
        print(f"{label:>12}: {beats[0]} beats, {writes} durable writes -> "
              f"{result['writes_per_node_hour']:.1f} writes/node/hour "
              f"({result['beats_per_node_hour']:.0f} beats/node/hour); frontend CPU {result['cpu_percent']:.0f}% "
              f"of one core at {beats[0] / RUN_S:.0f} beats/s", flush=True)
        return result
    finally:
        cluster.stop()
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def main() -> None:
    if not (port_open("127.0.0.1", 5432) and port_open("127.0.0.1", 4222)):
        raise SystemExit("this benchmark needs PostgreSQL on 127.0.0.1:5432 and NATS on 127.0.0.1:4222")
    print(f"{NODES} nodes, beat every {BEAT_INTERVAL_S:g}s, checkpoint {CHECKPOINT_S:g}s, "
          f"time compressed x{COMPRESSION:g} ({RUN_S:g}s per run = {RUN_S * COMPRESSION / 60:g} simulated min)")
    checkpointed = await _run("checkpointed", CHECKPOINT_S / COMPRESSION)
    baseline = await _run("per-beat", 0.1)  # below the beat interval: one durable write per beat
    ratio = checkpointed["writes"] / max(1, baseline["writes"])
    print(f"durable writes: checkpointed / one-write-per-beat = {ratio:.3f} "
          f"({1 / max(ratio, 1e-9):.1f}x fewer); frontend CPU {checkpointed['cpu_percent']:.0f}% vs "
          f"{baseline['cpu_percent']:.0f}%")


if __name__ == "__main__":
    asyncio.run(main())
