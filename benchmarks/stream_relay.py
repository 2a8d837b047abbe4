"""Stream relay cost: frontend CPU per relayed streamed token, against the backend's own CPU per token.

In one run, on this machine (its own PostgreSQL and NATS, a frontend, two workers, simulator backends):
  flood, coalesced   — a zero-delay simulator: the engine outruns the relay, and the backend sends the
                       text pieces that piled up as one gRPC message (the frontend: one SSE write);
  flood, per token   — the same with CORRAL_STREAM_COALESCE_MAX=1 on the second worker: one gRPC
                       message and one SSE event per token, the frontend saturated (per-message cost);
  paced              — one stream at a time at 500 tokens/s: every token wakes the frontend up;
  decode             — one stream from a 100 tokens/s simulator, through corral vs. the backend's gRPC
                       stream read directly (the same engine alone): the relay must keep its speed.
Each flood/paced run is measured twice: over the backends' fast lane (bench-w1, bench-w2) and, as the
in-run "before", over gRPC only (bench-w3, bench-w4 with CORRAL_BACKEND_FAST_LANE=0).
CPU time is read from /proc/<pid>/stat (user + system, all threads) for the frontend and the backend
process, minus the frontend's idle background (heartbeats, in-flight reports) over the same duration.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import grpc
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from corral.proto import backend_pb2, backend_pb2_grpc
from corral.up.embedded import embedded_nats, embedded_postgres
from support.cluster import Cluster, free_port_pair, spawn, wait_http
from support.processes import backend_pid

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
TOKEN = "bench-token"
COALESCE_ENV = (
    "CORRAL_STREAM_COALESCE_MAX"  # backends/reply_pump.py (literal: the script also runs on older trees)
)
FAST_LANE_ENV = "CORRAL_BACKEND_FAST_LANE"  # corral/lane/server.py


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S  # utime + stime


async def stream_tokens(host: str, port: int, model: str, max_tokens: int) -> int:
    """One streamed chat completion over a raw HTTP/1.1 connection; returns the body bytes read."""
    body = orjson.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": "relay these"}],
            "max_tokens": max_tokens,
            "stream": True,
        }
    )
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body
    )
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"stream failed: {head!r} {await reader.read(2000)!r}")
    data = await reader.read()  # until the server closes (Connection: close)
    writer.close()
    if b"data: [DONE]" not in data:
        raise RuntimeError(f"stream did not finish: {data[-300:]!r}")
    return len(data)


@dataclass
class Run:
    label: str
    tokens: int
    seconds: float
    frontend_cpu_s: float
    backend_cpu_s: float

    def row(self) -> str:
        f_us = self.frontend_cpu_s / self.tokens * 1e6
        b_us = self.backend_cpu_s / self.tokens * 1e6
        return (
            f"{self.label:<34} {self.tokens:>8} {self.tokens / self.seconds:>10.0f} {f_us:>10.1f} "
            f"{b_us:>10.1f} {f_us / b_us:>8.2f}"
        )


async def measure(
    label: str,
    cluster: Cluster,
    model: str,
    streams: int,
    concurrency: int,
    max_tokens: int,
    idle_cpu_per_s: float,
    backend: int,
) -> Run:
    host, port = cluster.frontend_url.removeprefix("http://").split(":")
    frontend = cluster.frontend.popen.pid if cluster.frontend else 0
    remaining = [streams]

    async def client() -> None:
        while remaining[0] > 0:
            remaining[0] -= 1
            await stream_tokens(host, int(port), model, max_tokens)

    f0, b0, started = cpu_s(frontend), cpu_s(backend), time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    seconds = time.perf_counter() - started
    frontend_cpu = cpu_s(frontend) - f0 - idle_cpu_per_s * seconds
    return Run(label, streams * max_tokens, seconds, frontend_cpu, cpu_s(backend) - b0)


async def decode_speed(cluster: Cluster, model: str, address: str, max_tokens: int) -> tuple[float, float]:
    """tokens/s of one stream through corral and read from the backend directly (the engine alone)."""
    host, port = cluster.frontend_url.removeprefix("http://").split(":")
    started = time.perf_counter()
    await stream_tokens(host, int(port), model, max_tokens)
    through = max_tokens / (time.perf_counter() - started)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = backend_pb2_grpc.BackendStub(channel)
        request = backend_pb2.PredictOptions(Prompt="relay these", Tokens=max_tokens)
        started = time.perf_counter()
        async for _reply in stub.PredictStream(request, metadata=(("authorization", f"Bearer {TOKEN}"),)):
            pass
        alone = max_tokens / (time.perf_counter() - started)
    return through, alone


async def warm(cluster: Cluster, model: str) -> tuple[int, str]:
    host, port = cluster.frontend_url.removeprefix("http://").split(":")
    await stream_tokens(host, int(port), model, 4)
    conn = await asyncpg.connect(cluster.database_url)
    address = await conn.fetchval("SELECT address FROM node_models WHERE model_name = $1", model)
    await conn.close()
    pid = backend_pid(address.rpartition(":")[2], cluster.workers)
    if pid is None:
        raise RuntimeError(f"no backend process for {model} at {address}")
    return pid, address


async def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="corral-bench-relay-", dir="/var/tmp"))
    os.chmod(root, 0o755)
    pg, nats = embedded_postgres(root / "pg"), embedded_nats(root / "nats")
    pg.start()
    nats.start()
    database_url = await asyncio.to_thread(pg.create_database, "relay")
    cluster = Cluster(root=root, database_url=database_url, nats_url=nats.url, token=TOKEN)
    cluster.models_dir.mkdir(parents=True)
    paced = "\n  - output_token_time_s:0.002"
    models = (
        ("flood", "", "bench-w1"),
        ("per-token", "", "bench-w2"),
        ("paced", paced, "bench-w1"),
        ("decode", "\n  - output_token_time_s:0.01", "bench-w1"),
        ("flood-grpc", "", "bench-w3"),
        ("per-token-grpc", "", "bench-w4"),
        ("paced-grpc", paced, "bench-w3"),
    )
    for name, options, node in models:
        (cluster.models_dir / f"{name}.yaml").write_text(
            f"name: {name}\nbackend: simulator\nparameters:\n  model: {name}\noptions:{options or ' []'}\n"
            f"node_selector:\n  node.name: {node}\n"
        )
    try:
        cluster.start_frontend()
        cluster.start_worker("bench-w1")
        for name, env in (
            ("bench-w2", {COALESCE_ENV: "1"}),
            ("bench-w3", {FAST_LANE_ENV: "0"}),
            ("bench-w4", {COALESCE_ENV: "1", FAST_LANE_ENV: "0"}),
        ):
            base = free_port_pair()
            worker = spawn(name, cluster.worker_argv(name, base), cluster.root / "logs", env=env)
            cluster.workers.append(worker)
            wait_http(f"http://127.0.0.1:{base - 1}/readyz", worker)
        pids = {name: await warm(cluster, name) for name, _, _ in models}
        for name, _, _ in models:  # the frontend finds each backend's fast lane after its first request
            await warm(cluster, name)
        await asyncio.sleep(0.5)
        frontend = cluster.frontend.popen.pid if cluster.frontend else 0
        idle0 = cpu_s(frontend)
        await asyncio.sleep(3.0)
        idle_rate = (cpu_s(frontend) - idle0) / 3.0
        runs = []
        for suffix, via in (("-grpc", "gRPC"), ("", "lane")):
            runs += [
                await measure(
                    f"{via}: flood, coalesced, c=8",
                    cluster,
                    f"flood{suffix}",
                    96,
                    8,
                    1024,
                    idle_rate,
                    pids[f"flood{suffix}"][0],
                ),
                await measure(
                    f"{via}: flood, msg per token, c=8",
                    cluster,
                    f"per-token{suffix}",
                    48,
                    8,
                    512,
                    idle_rate,
                    pids[f"per-token{suffix}"][0],
                ),
                await measure(
                    f"{via}: paced, 1 stream 500 tok/s",
                    cluster,
                    f"paced{suffix}",
                    4,
                    1,
                    500,
                    idle_rate,
                    pids[f"paced{suffix}"][0],
                ),
            ]
        through, alone = await decode_speed(cluster, "decode", pids["decode"][1], 200)
    finally:
        cluster.stop()
        nats.stop()
        pg.stop(quiet=True)
        shutil.rmtree(root, ignore_errors=True)
    print(f"{'run':<34} {'tokens':>8} {'tok/s':>10} {'fe µs/tok':>10} {'be µs/tok':>10} {'fe/be':>8}")
    for run in runs:
        print(run.row())
    for before, after in zip(runs[:3], runs[3:], strict=True):
        b_us, a_us = (r.frontend_cpu_s / r.tokens * 1e6 for r in (before, after))
        print(
            f"fast lane vs gRPC, {after.label.removeprefix('lane: ')}: frontend µs/token {b_us:.1f} -> {a_us:.1f} "
            f"(x{a_us / b_us:.2f}; target <= 20)"
        )
    print(f"frontend idle background: {idle_rate * 1000:.1f} ms CPU/s (subtracted)")
    print(
        f"decode speed, one stream at 100 tok/s: through corral {through:.1f} tok/s, engine alone "
        f"{alone:.1f} tok/s (x{through / alone:.3f})"
    )


if __name__ == "__main__":
    asyncio.run(main())
