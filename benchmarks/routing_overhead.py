"""Routing overhead: a tiny chat request through corral vs. the same answer from a minimal HTTP server.

In one run, on this machine:
  baseline — a minimal HTTP server (TCP_NODELAY, one write per response) answering the chat request;
  corral   — frontend → zero-delay `simulator` replica on a worker (warm), same client, same request,
             over the backend's fast lane and, as the in-run "before", over gRPC only
             (CORRAL_BACKEND_FAST_LANE=0 on the worker, so its backend advertises no lane);
  vllm-router / litellm — routing to the baseline server, when those packages are installed;
  python floor — benchmarks/python_floor_proxy.py (uvloop + httptools, forwards bytes, nothing else) in front
             of the baseline server: what a request costs the interpreter and the event loop alone.
Prints p50/p99 at concurrency 1, req/s at concurrency 16, the added latency and the ratios, the
frontend's CPU per warm request at c=16 (user + system of its processes, from /proc), for one and two
frontend processes on one port (`--http-workers`), and the PostgreSQL statements it ran per warm
request (transactions counted by pg_stat_database over the measured run, minus the idle background).
The rows are measured one after another, minutes apart, and this machine's load moves between them (the
same row has moved 60-120 µs between runs); the figure to compare with vllm-router is the paired rounds':
CORRAL_BENCH_PAIRED_ROUNDS (5) rounds of c=16, corral x1 with nothing queued then vllm-router, both stacks
up, each round's ratio and their median. The simulator backend's own CPU per request is printed too.
"""

from __future__ import annotations

import asyncio
import os
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

from corral.runtime.processes import port_open
from support.cluster import Cluster, free_port

SERIAL = 400
CONCURRENT = 10000  # at c=16: long enough (1-2 s) that the CPU figure is not one clock tick in ten
CONCURRENCY = 16
# frontend processes on one port (`corral run --http-workers N`), e.g. CORRAL_BENCH_HTTP_WORKERS=1 for one run
HTTP_WORKERS = tuple(int(n) for n in os.environ.get("CORRAL_BENCH_HTTP_WORKERS", "1,2").split(","))
FAST_LANE_ENV = (
    "CORRAL_BACKEND_FAST_LANE"  # corral/lane/server.py (literal: the script also runs on older trees)
)
NATIVE_ENV = "CORRAL_NATIVE"  # corral/native.py: "0" runs the compiled request path as Python
TARGET_CPU_US = 120
PAIRED_ROUNDS = int(os.environ.get("CORRAL_BENCH_PAIRED_ROUNDS", "5"))
BACKEND_CPU_US: dict[
    tuple[int, bool, int], float
] = {}  # the simulator backend's, per request, per corral row
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
BODY = {"model": "sim", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 4}
CANNED = orjson.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "sim",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "w1 w2 w3 w4"},
                "finish_reason": "length",
            }
        ],
        "usage": {"prompt_tokens": 2, "completion_tokens": 4, "total_tokens": 6},
    }
)


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
            self.transport.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "  # type: ignore[attr-defined]
                + str(len(CANNED)).encode()
                + b"\r\n\r\n"
                + CANNED
            )


async def _measure(
    call: Callable[[], Awaitable[None]], cpu_s: Callable[[], float] = lambda: 0.0
) -> tuple[float, float, float, float]:
    """p50 and p99 ms at c=1, req/s at c=16, and the server's CPU µs per request at c=16 (`cpu_s`: its CPU)."""
    for _ in range(50):
        await call()
    latencies = []
    for _ in range(SERIAL):
        start = time.perf_counter()
        await call()
        latencies.append(time.perf_counter() - start)
    latencies.sort()
    rps, cpu_us = await _concurrent(call, cpu_s)
    return statistics.median(latencies) * 1000, latencies[int(len(latencies) * 0.99)] * 1000, rps, cpu_us


async def _concurrent(call: Callable[[], Awaitable[None]], cpu_s: Callable[[], float]) -> tuple[float, float]:
    """req/s of CONCURRENT calls at c=16, and the server's CPU µs per request over them (`cpu_s`: its CPU)."""
    remaining = [CONCURRENT]

    async def worker() -> None:
        while remaining[0] > 0:
            remaining[0] -= 1
            await call()

    cpu_before = cpu_s()
    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    rps = CONCURRENT / (time.perf_counter() - start)
    return rps, (cpu_s() - cpu_before) / CONCURRENT * 1e6


Served = tuple[
    Callable[[], Awaitable[None]], Callable[[], float]
]  # one request, and the server's CPU seconds


async def _paired(corral: Served, peer: Served, python: Served | None = None) -> None:
    """PAIRED_ROUNDS rounds of c=16, corral then the peer in each (one stack each, kept up): this machine's
    load moves between runs, so the ratio of two measurements made seconds apart is the figure to read. `python`:
    the same corral stack with its request path run as Python (CORRAL_NATIVE=0), measured in the same rounds.
    Each measurement also reads the whole machine's busy CPU per request (/proc/stat: the load generator, the
    router or frontend, the backend process or the minimal server, the kernel): at c=16 on 2 cores, throughput is
    about what that leaves."""
    rounds, as_python, machine = [], [], []
    for _ in range(PAIRED_ROUNDS):
        busy_s = _machine_busy_s()
        ours = await _concurrent(*corral)
        between_s = _machine_busy_s()
        theirs = await _concurrent(*peer)
        machine.append(
            ((between_s - busy_s) / CONCURRENT * 1e6, (_machine_busy_s() - between_s) / CONCURRENT * 1e6)
        )
        rounds.append((ours, theirs, ours[1] / theirs[1], ours[0] / theirs[0]))
        if python is not None:
            slow = await _concurrent(*python)
            as_python.append((slow, ours[1] / slow[1], ours[0] / slow[0]))
    print(
        f"paired rounds, corral x1 nothing queued vs vllm-router (c={CONCURRENCY}, {CONCURRENT} requests each):"
    )
    for ((rps, cpu), (peer_rps, peer_cpu), cpu_ratio, rps_ratio), (our_busy, their_busy) in zip(
        rounds, machine, strict=True
    ):
        print(
            f"  CPU µs/req {cpu:5.0f} vs {peer_cpu:5.0f} (x{cpu_ratio:.2f})   "
            f"req/s {rps:6.0f} vs {peer_rps:6.0f} (x{rps_ratio:.2f})   "
            f"machine CPU µs/req {our_busy:4.0f} vs {their_busy:4.0f}"
        )
    print(
        f"  median: CPU per request x{statistics.median(r[2] for r in rounds):.2f}, "
        f"throughput x{statistics.median(r[3] for r in rounds):.2f}, machine CPU per request "
        f"{statistics.median(m[0] for m in machine):.0f} vs {statistics.median(m[1] for m in machine):.0f} µs "
        f"(x{statistics.median(m[0] / m[1] for m in machine):.2f})"
    )
    if as_python:
        print(
            "the same rounds, corral compiled (make native) vs its request path as Python (CORRAL_NATIVE=0):"
        )
        for ((rps, cpu), *_), ((slow_rps, slow_cpu), cpu_ratio, rps_ratio) in zip(
            rounds, as_python, strict=True
        ):
            print(
                f"  CPU µs/req {cpu:5.0f} vs {slow_cpu:5.0f} (x{cpu_ratio:.2f})   "
                f"req/s {rps:6.0f} vs {slow_rps:6.0f} (x{rps_ratio:.2f})"
            )
        print(
            f"  median: CPU per request x{statistics.median(r[1] for r in as_python):.2f}, "
            f"throughput x{statistics.median(r[2] for r in as_python):.2f}"
        )


def _machine_busy_s() -> float:
    """Busy CPU seconds of the whole machine so far, all cores (/proc/stat: all but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of `pid` and its children (the `--http-workers` processes)."""
    pids = [pid, *(int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split())]
    total = 0.0
    for one in pids:
        fields = Path(f"/proc/{one}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _children_cpu_s(pid: int) -> float:
    """User + system CPU seconds of the children of `pid` (a worker's backend processes), not its own."""
    return sum(
        _tree_cpu_s(int(child))
        for task in os.listdir(f"/proc/{pid}/task")
        for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split()
    )


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
        request = (
            b"POST " + path.encode() + b" HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload
        )
        conn = self._idle.pop() if self._idle else None
        try:
            if conn is None:
                raise ConnectionResetError
            conn[1].write(request)
            head = await conn[0].readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionResetError):
            # none idle, or the server closed it (kept alive past its timeout while another stack was measured)
            conn = await asyncio.open_connection(self.host, int(self.port))
            conn[1].write(request)
            head = await conn[0].readuntil(b"\r\n\r\n")
        reader, writer = conn
        status = int(head.split(b" ", 2)[1])
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
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
        return int(
            await conn.fetchval(
                "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"
            )
        )
    finally:
        await conn.close()


async def _peer_router(baseline_port: int) -> tuple[str, subprocess.Popen[bytes]] | None:
    binary = shutil.which("vllm-router") or shutil.which("vllm-router", path=sysconfig.get_path("scripts"))
    if binary is None:
        return None
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            "--worker-urls",
            f"http://127.0.0.1:{baseline_port}",
            "--policy",
            "round_robin",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--worker-startup-check-interval",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(300):  # the baseline server answers its health checks on this event loop
        if port_open("127.0.0.1", port, timeout_s=0.05):
            return f"http://127.0.0.1:{port}", proc
        await asyncio.sleep(0.1)
    proc.terminate()
    return None


async def _corral(
    http_workers: int,
    fast_lane: bool = True,
    slots: int = 0,
    then: Callable[[Served], Awaitable[None]] | None = None,
    native: bool = True,
) -> tuple[tuple[float, float, float, float], float, int]:
    """One fresh stack (database, frontend with `http_workers` processes, one worker): its figures, the
    PostgreSQL transactions during the measured run (idle background subtracted) and the request count.
    `slots`: the frontend's --replica-slots (0: its default, under which c=16 on one replica queues some).
    Also records the simulator backend's CPU per request over the same run in BACKEND_CPU_US; `then` is given
    the stack's request and CPU reading after the measured run, the stack still up. `native=False`: its processes
    run the request path's modules as Python (CORRAL_NATIVE=0), not their compiled builds."""
    name = f"corral_bench_{int(time.time())}_{http_workers}_{int(fast_lane)}_{slots}_{int(native)}"
    conn = await asyncpg.connect(PG_ADMIN)
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    database_url = f"postgresql://postgres@127.0.0.1:5432/{name}"
    root = Path(tempfile.mkdtemp(prefix="corral-bench-", dir="/var/tmp"))
    cluster = Cluster(
        root=root, database_url=database_url, nats_url="nats://127.0.0.1:4222", fail_on_loop_stalls=False
    )
    cluster.models_dir.mkdir(parents=True)
    (cluster.models_dir / "sim.yaml").write_text("name: sim\nbackend: simulator\nparameters:\n  model: sim\n")
    try:
        if not native:
            os.environ[NATIVE_ENV] = "0"  # the frontend, the worker and its backends inherit it
        try:
            cluster.start_frontend(
                *(("--http-workers", str(http_workers)) if http_workers > 1 else ()),
                *(("--replica-slots", str(slots)) if slots else ()),
            )
            os.environ[FAST_LANE_ENV] = "1" if fast_lane else "0"  # the worker's backends inherit it
            try:
                cluster.start_worker("bench-w1")
            finally:
                os.environ.pop(FAST_LANE_ENV, None)
        finally:
            os.environ.pop(NATIVE_ENV, None)
        assert cluster.frontend is not None
        pid = cluster.frontend.popen.pid
        async with _client(cluster.frontend_url) as front:
            await front.post("/v1/chat/completions", json=BODY)  # cold load
            await asyncio.sleep(1.0)
            await front.post("/v1/chat/completions", json=BODY)  # the frontend finds the fast lane meanwhile
            await asyncio.sleep(0.5)
            idle_before = await _xacts(database_url)
            started = time.perf_counter()
            await asyncio.sleep(3.0)
            idle_rate = (await _xacts(database_url) - idle_before - 1) / (time.perf_counter() - started)
            before = await _xacts(database_url)
            started = time.perf_counter()

            async def routed() -> None:
                await front.post("/v1/chat/completions", json=BODY)

            worker_pid, backend_marks = cluster.workers[0].popen.pid, []

            def cpu_s() -> float:  # the frontend's (and the backend's, noted) at the start and end of c=16
                backend_marks.append(_children_cpu_s(worker_pid))
                return _tree_cpu_s(pid)

            figures = await _measure(routed, cpu_s)
            BACKEND_CPU_US[(http_workers, fast_lane, slots)] = (
                (backend_marks[1] - backend_marks[0]) / CONCURRENT * 1e6
            )
            elapsed = time.perf_counter() - started
            statements = max(0.0, (await _xacts(database_url) - before - 1) - idle_rate * elapsed)
            if then is not None:
                await then((routed, lambda: _tree_cpu_s(pid)))
        return figures, statements, 50 + SERIAL + CONCURRENT
    finally:
        cluster.stop()
        admin = await asyncpg.connect(PG_ADMIN)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # leave the server as found
        await admin.close()


async def _nothing_queued(
    peer: tuple[str, subprocess.Popen[bytes]] | None,
) -> tuple[tuple[float, float, float, float], float, int]:
    """The nothing-queued stack's figures, then its paired rounds against the peer router (when it runs) and, when
    the request path is compiled here, against the same stack run as Python."""
    if peer is None:
        return await _corral(1, slots=CONCURRENCY * 4)
    async with _client(peer[0]) as client:

        async def to_peer() -> None:
            await client.post("/v1/chat/completions", json=BODY)

        to_peer_served: Served = (to_peer, lambda: _tree_cpu_s(peer[1].pid))
        if not _compiled():
            print("the request path is not compiled here (make native): no 'as Python' rounds")

            async def paired(corral: Served) -> None:
                await _paired(corral, to_peer_served)

            return await _corral(1, slots=CONCURRENCY * 4, then=paired)
        result: list[tuple[tuple[float, float, float, float], float, int]] = []

        async def with_python(python: Served) -> None:
            async def paired(corral: Served) -> None:
                await _paired(corral, to_peer_served, python)

            result.append(await _corral(1, slots=CONCURRENCY * 4, then=paired))

        await _corral(1, slots=CONCURRENCY * 4, then=with_python, native=False)
        return result[0]


def _compiled() -> bool:
    """Whether this checkout's request path is compiled (corral/native.py; the script also runs on older trees)."""
    try:
        from corral import native
    except ImportError:
        return False
    return native.library() is not None and not native.stale()


def _print_backend_cpu() -> None:
    backend = BACKEND_CPU_US.get((1, True, CONCURRENCY * 4))
    if backend is not None:
        print(
            f"the simulator backend's own CPU per request at c=16 (nothing queued): {backend:.0f} µs, on the same "
            f"cores: throughput at c=16 is bound by frontend + backend + load generator, where vllm-router's row "
            f"has the minimal server (in the load generator's process) behind it"
        )


async def main() -> None:
    if not (port_open("127.0.0.1", 5432) and port_open("127.0.0.1", 4222)):
        raise SystemExit("this benchmark needs PostgreSQL on 127.0.0.1:5432 and NATS on 127.0.0.1:4222")
    loop = asyncio.get_running_loop()
    baseline_port = free_port()
    server = await loop.create_server(_Minimal, "127.0.0.1", baseline_port)
    peer = await _peer_router(baseline_port)
    if peer is None:
        print("vllm-router: not installed (pip install -e '.[bench]') or did not start; its row is missing")
    rows: list[tuple[str, tuple[float, float, float, float]]] = []
    statements: list[tuple[str, float, int]] = []
    try:
        async with _client(f"http://127.0.0.1:{baseline_port}") as base:
            rows.append(
                (
                    "baseline: minimal HTTP server",
                    await _measure(lambda: base.post("/v1/chat/completions", json=BODY)),
                )
            )
        grpc_figures, count, requests = await _corral(1, fast_lane=False)
        rows.append(("corral: frontend x1 -> simulator, gRPC", grpc_figures))
        statements.append(("x1, gRPC", count, requests))
        for processes in HTTP_WORKERS:
            figures, count, requests = await _corral(processes)
            rows.append((f"corral: frontend x{processes} -> simulator", figures))
            statements.append((f"x{processes}", count, requests))
        figures, count, requests = await _nothing_queued(peer)
        rows.append(("corral: x1, nothing queued (slots 64)", figures))
        statements.append(("x1, nothing queued", count, requests))
        if peer:
            peer_pid = peer[1].pid
            async with _client(peer[0]) as client:
                rows.append(
                    (
                        "vllm-router -> baseline",
                        await _measure(
                            lambda: client.post("/v1/chat/completions", json=BODY),
                            lambda: _tree_cpu_s(peer_pid),
                        ),
                    )
                )
        floor_port = free_port()
        floor = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).with_name("python_floor_proxy.py")),
                str(floor_port),
                str(baseline_port),
            ]
        )
        try:
            for _ in range(100):
                if port_open("127.0.0.1", floor_port):
                    break
                await asyncio.sleep(0.05)
            async with _client(f"http://127.0.0.1:{floor_port}") as client:
                rows.append(
                    (
                        "python floor: bare uvloop proxy -> baseline",
                        await _measure(
                            lambda: client.post("/v1/chat/completions", json=BODY),
                            lambda: _tree_cpu_s(floor.pid),
                        ),
                    )
                )
        finally:
            floor.terminate()
            floor.wait()
    finally:
        if peer:
            peer[1].terminate()
        server.close()
    base_p50 = rows[0][1][0]
    base_rps = rows[0][1][2]
    print(f"{'path':<40} {'p50 ms':>8} {'p99 ms':>8} {'req/s c=16':>11} {'added p50':>10} {'CPU µs/req':>11}")
    for label, (p50, p99, rps, cpu_us) in rows:
        cpu = f"{cpu_us:>11.0f}" if not label.startswith("baseline") else f"{'-':>11}"
        print(f"{label:<40} {p50:>8.2f} {p99:>8.2f} {rps:>11.0f} {p50 - base_p50:>+10.2f} {cpu}")
    p50, _, rps, cpu_us = rows[2][1]
    print(
        f"corral vs baseline: latency x{p50 / base_p50:.2f} (+{p50 - base_p50:.2f} ms), "
        f"throughput x{rps / base_rps:.2f}; frontend CPU per warm request {cpu_us:.0f} µs "
        f"(target <= {TARGET_CPU_US} µs)"
    )
    print(
        f"fast lane vs gRPC (x1): CPU per request x{cpu_us / grpc_figures[3]:.2f} "
        f"({grpc_figures[3]:.0f} -> {cpu_us:.0f} µs), throughput x{rps / grpc_figures[2]:.2f}, "
        f"p50 x{p50 / grpc_figures[0]:.2f}"
    )
    if HTTP_WORKERS[:2] == (1, 2):
        one, two = rows[2][1], rows[3][1]
        print(
            f"--http-workers 2 vs 1: throughput x{two[2] / one[2]:.2f}, CPU per request x{two[3] / one[3]:.2f}"
        )
    by_label = dict(rows)
    lean = by_label["corral: x1, nothing queued (slots 64)"]
    floor_figures = by_label["python floor: bare uvloop proxy -> baseline"]
    if peer:
        rust = by_label["vllm-router -> baseline"]
        print(
            f"corral x1 vs vllm-router: throughput x{rps / rust[2]:.2f}, "
            f"CPU per request x{cpu_us / max(rust[3], 1e-9):.1f}"
        )
        print(
            f"corral x1, nothing queued vs vllm-router: throughput x{lean[2] / rust[2]:.2f}, "
            f"CPU per request x{lean[3] / max(rust[3], 1e-9):.2f} ({lean[3]:.0f} vs {rust[3]:.0f} µs)"
        )
        print(
            f"python floor vs vllm-router: CPU per request x{floor_figures[3] / max(rust[3], 1e-9):.2f} "
            f"({floor_figures[3]:.0f} vs {rust[3]:.0f} µs): a Python process that only forwards"
        )
    print(
        f"corral x1, nothing queued vs the python floor: CPU per request x{lean[3] / max(floor_figures[3], 1e-9):.2f}"
        f" (+{lean[3] - floor_figures[3]:.0f} µs of corral's own work per request)"
    )
    _print_backend_cpu()
    for label, count, requests in statements:
        print(
            f"PostgreSQL transactions per warm request ({label}): {count / requests:.4f} "
            f"({count:.0f} over {requests} requests, idle background subtracted)"
        )


if __name__ == "__main__":
    asyncio.run(main())
