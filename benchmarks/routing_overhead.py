"""Routing overhead: a tiny chat request through corral vs. the same answer from a minimal HTTP server.

In one run, on this machine:
  baseline — a minimal HTTP server (TCP_NODELAY, one write per response) answering the chat request;
  corral   — frontend → zero-delay `simulator` replica on a worker (warm), same client, same request;
  vllm-router / litellm — routing to the baseline server, when those packages are installed.
Prints p50/p99 at concurrency 1, req/s at concurrency 16, the added latency and the ratios, and the
PostgreSQL statements the frontend ran per warm request (transactions counted by pg_stat_database
over the measured run, minus the same-length idle background).
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from corral.embedded import port_open  # noqa: E402
from support.cluster import Cluster, free_port  # noqa: E402

SERIAL = 400
CONCURRENT = 2000
CONCURRENCY = 16
BODY = {"model": "sim", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 4}
CANNED = orjson.dumps({
    "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "sim",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "w1 w2 w3 w4"}, "finish_reason": "length"}],
    "usage": {"prompt_tokens": 2, "completion_tokens": 4, "total_tokens": 6},
})


class _Minimal(asyncio.Protocol):
    """Answers every request on a connection with the canned completion, in one write."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, _, rest = self.buffer.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if len(rest) < length:
                return
            self.buffer = rest[length:]
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "  # type: ignore[attr-defined]
                                 + str(len(CANNED)).encode() + b"\r\n\r\n" + CANNED)


async def _measure(call: Callable[[], Awaitable[None]]) -> tuple[float, float, float]:
    for _ in range(50):
        await call()
    latencies = []
    for _ in range(SERIAL):
        start = time.perf_counter()
        await call()
        latencies.append(time.perf_counter() - start)
    latencies.sort()
    remaining = [CONCURRENT]

    async def worker() -> None:
        while remaining[0] > 0:
            remaining[0] -= 1
            await call()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    rps = CONCURRENT / (time.perf_counter() - start)
    return statistics.median(latencies) * 1000, latencies[int(len(latencies) * 0.99)] * 1000, rps


class _LeanClient:
    """A minimal keep-alive HTTP/1.1 client (one request at a time per connection), so the load
    generator costs little next to the servers it measures; a pool of connections for concurrency."""

    def __init__(self, url: str) -> None:
        self.host, self.port = url.removeprefix("http://").split(":")
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def __aenter__(self) -> _LeanClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        for _, writer in self._idle:
            writer.close()

    async def post(self, path: str, json: object) -> int:
        payload = orjson.dumps(json)
        conn = self._idle.pop() if self._idle else await asyncio.open_connection(self.host, int(self.port))
        reader, writer = conn
        writer.write(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        await reader.readexactly(length)
        self._idle.append(conn)
        if status != 200:
            raise RuntimeError(f"{path}: HTTP {status}")
        return status


def _client(url: str) -> _LeanClient:
    return _LeanClient(url)


async def _xacts(database_url: str) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        return int(await conn.fetchval(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"))
    finally:
        await conn.close()


async def _peer_router(baseline_port: int) -> tuple[str, subprocess.Popen[bytes]] | None:
    binary = shutil.which("vllm-router") or shutil.which("vllm-router", path=sysconfig.get_path("scripts"))
    if binary is None:
        return None
    port = free_port()
    proc = subprocess.Popen([binary, "--worker-urls", f"http://127.0.0.1:{baseline_port}", "--policy",
                             "round_robin", "--host", "127.0.0.1", "--port", str(port),
                             "--worker-startup-check-interval", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):  # the baseline server answers its health checks on this event loop
        if port_open("127.0.0.1", port, timeout_s=0.05):
            return f"http://127.0.0.1:{port}", proc
        await asyncio.sleep(0.1)
    proc.terminate()
    return None


async def main() -> None:
    if not port_open("127.0.0.1", 5432):
        raise SystemExit("this benchmark needs PostgreSQL on 127.0.0.1:5432 and NATS on 127.0.0.1:4222")
    name = f"corral_bench_{int(time.time())}"
    conn = await asyncpg.connect("postgresql://postgres@127.0.0.1:5432/postgres")
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    database_url = f"postgresql://postgres@127.0.0.1:5432/{name}"
    loop = asyncio.get_running_loop()
    baseline_port = free_port()
    server = await loop.create_server(_Minimal, "127.0.0.1", baseline_port)
    root = Path(tempfile.mkdtemp(prefix="corral-bench-", dir="/var/tmp"))
    cluster = Cluster(root=root, database_url=database_url, nats_url="nats://127.0.0.1:4222")
    cluster.models_dir.mkdir(parents=True)
    (cluster.models_dir / "sim.yaml").write_text("name: sim\nbackend: simulator\nparameters:\n  model: sim\n")
    cluster.start_frontend()
    cluster.start_worker("bench-w1")
    peer = await _peer_router(baseline_port)
    rows: list[tuple[str, tuple[float, float, float]]] = []
    try:
        async with _client(f"http://127.0.0.1:{baseline_port}") as base:
            rows.append(("baseline: minimal HTTP server", await _measure(lambda: base.post("/v1/chat/completions",
                                                                                           json=BODY))))
        async with _client(cluster.frontend_url) as front:
            await front.post("/v1/chat/completions", json=BODY)  # cold load
            await asyncio.sleep(1.0)
            idle_before = await _xacts(database_url)
            started = time.perf_counter()
            await asyncio.sleep(3.0)
            idle_rate = (await _xacts(database_url) - idle_before - 1) / (time.perf_counter() - started)
            before = await _xacts(database_url)
            started = time.perf_counter()

            async def routed() -> None:
                await front.post("/v1/chat/completions", json=BODY)

            rows.append(("corral: frontend -> simulator replica", await _measure(routed)))
            elapsed = time.perf_counter() - started
            statements = max(0.0, (await _xacts(database_url) - before - 1) - idle_rate * elapsed)
        if peer:
            async with _client(peer[0]) as client:
                rows.append(("vllm-router -> baseline", await _measure(
                    lambda: client.post("/v1/chat/completions", json=BODY))))
    finally:
        if peer:
            peer[1].terminate()
        cluster.stop()
        server.close()
        admin = await asyncpg.connect("postgresql://postgres@127.0.0.1:5432/postgres")
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # leave the server as found
        await admin.close()
    base_p50, _, base_rps = rows[0][1]
    print(f"{'path':<40} {'p50 ms':>8} {'p99 ms':>8} {'req/s c=16':>11} {'added p50':>10}")
    for label, (p50, p99, rps) in rows:
        print(f"{label:<40} {p50:>8.2f} {p99:>8.2f} {rps:>11.0f} {p50 - base_p50:>+10.2f}")
    p50, _, rps = rows[1][1]
    print(f"corral vs baseline: latency x{p50 / base_p50:.2f} (+{p50 - base_p50:.2f} ms), "
          f"throughput x{rps / base_rps:.2f}")
    requests = 50 + SERIAL + CONCURRENT
    print(f"PostgreSQL transactions per warm request: {statements / requests:.4f} "
          f"({statements:.0f} over {requests} requests, idle background {idle_rate:.2f}/s subtracted)")


if __name__ == "__main__":
    asyncio.run(main())
