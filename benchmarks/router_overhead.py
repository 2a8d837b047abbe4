"""Router overhead: a chat completion through frontend → worker backend vs. the same gRPC call direct.

Starts a real frontend and worker (simulator engine, zero simulated compute), then measures
p50 latency at concurrency 1 and throughput at concurrency 16 for (a) gRPC Predict straight to
the backend process — the baseline — and (b) POST /v1/chat/completions through the frontend.
Prints the ratio of the two, measured in the same run (these machines are noisy).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import asyncpg
import grpc
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from corral.embedded import port_open  # noqa: E402
from corral.proto import backend_pb2, backend_pb2_grpc  # noqa: E402
from support.cluster import Cluster  # noqa: E402

REQUESTS_SERIAL = 300
REQUESTS_CONCURRENT = 1600
CONCURRENCY = 16
BODY = {"model": "sim", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 4}


async def _database() -> str:
    if not port_open("127.0.0.1", 5432):
        raise SystemExit("benchmark needs PostgreSQL on 127.0.0.1:5432")
    name = f"corral_bench_{int(time.time())}"
    conn = await asyncpg.connect("postgresql://postgres@127.0.0.1:5432/postgres")
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    return f"postgresql://postgres@127.0.0.1:5432/{name}"


async def _measure(call, serial: int, concurrent: int) -> tuple[float, float]:
    latencies = []
    for _ in range(serial):
        start = time.perf_counter()
        await call()
        latencies.append(time.perf_counter() - start)
    queue = asyncio.Queue()
    for _ in range(concurrent):
        queue.put_nowait(None)

    async def worker() -> None:
        while not queue.empty():
            queue.get_nowait()
            await call()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return statistics.median(latencies) * 1000, concurrent / (time.perf_counter() - start)


async def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="corral-bench-", dir="/var/tmp"))
    cluster = Cluster(root=root, database_url=await _database(), nats_url="nats://127.0.0.1:4222")
    cluster.models_dir.mkdir(parents=True)
    (cluster.models_dir / "sim.yaml").write_text("name: sim\nbackend: simulator\nparameters:\n  model: sim\n")
    cluster.start_frontend()
    cluster.start_worker("bench-w1")
    try:
        async with httpx.AsyncClient(base_url=cluster.frontend_url, timeout=60,
                                     limits=httpx.Limits(max_connections=CONCURRENCY)) as http:
            (await http.post("/v1/chat/completions", json=BODY)).raise_for_status()  # cold load
            conn = await asyncpg.connect(cluster.database_url)
            address = await conn.fetchval("SELECT address FROM node_models WHERE model_name = 'sim'")
            await conn.close()
            channel = grpc.aio.insecure_channel(address)
            stub = backend_pb2_grpc.BackendStub(channel)
            metadata = (("authorization", f"Bearer {cluster.token}"),)
            request = backend_pb2.PredictOptions(
                Tokens=4, UseTokenizerTemplate=True, ModelIdentity="sim",
                Messages=[backend_pb2.Message(role="user", content="hello there")],
            )

            async def direct() -> None:
                await stub.Predict(request, metadata=metadata)

            async def routed() -> None:
                (await http.post("/v1/chat/completions", json=BODY)).raise_for_status()

            for call in (direct, routed):  # warm-up
                await _measure(call, 30, 100)
            d_p50, d_rps = await _measure(direct, REQUESTS_SERIAL, REQUESTS_CONCURRENT)
            r_p50, r_rps = await _measure(routed, REQUESTS_SERIAL, REQUESTS_CONCURRENT)
            await channel.close()
        print(f"{'path':<40} {'p50 ms (c=1)':>14} {'req/s (c=16)':>14}")
        print(f"{'direct gRPC Predict (baseline)':<40} {d_p50:>14.2f} {d_rps:>14.0f}")
        print(f"{'HTTP chat via frontend (corral)':<40} {r_p50:>14.2f} {r_rps:>14.0f}")
        print(f"ratio corral/baseline: latency x{r_p50 / d_p50:.2f} (+{r_p50 - d_p50:.2f} ms), "
              f"throughput x{r_rps / d_rps:.2f}")
    finally:
        cluster.stop()


if __name__ == "__main__":
    asyncio.run(main())
