"""Cold start: first token of a model no worker holds yet, vs. the work itself measured alone.

One run, on this machine, with its own PostgreSQL and NATS (embedded launchers), one frontend and
one worker, Gemma 3 270M (llama-cpp) staged from the frontend's models directory:
  cold     — POST /v1/chat/completions (stream) for the model: time to the first streamed byte;
  alone    — staging the same file to a fresh key on the worker (the uploader), the backend process
             start (`backend.install` over NATS), and llama-cpp-python's load + first token in a
             process of its own.
Prints each figure and cold / (staging + load + first token), the issue's target being ≤ 1.2. The
GGUF header read of placement is done once before the timed request (it is cached per process).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import asyncpg
import httpx
import nats

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from corral.embedded import embedded_nats, embedded_postgres  # noqa: E402
from corral.models.defaults import GEMMA_FILE, GEMMA_NAME, prepare_gemma  # noqa: E402
from corral.staging.uploader import stage_file  # noqa: E402
from support.cluster import Cluster  # noqa: E402

LOAD_ALONE = """
import sys, time
from llama_cpp import Llama
started = time.perf_counter()  # the engine's work, not the interpreter's start (the backend pays that at install)
llm = Llama(model_path=sys.argv[1], n_ctx=2048, verbose=False)
next(iter(llm.create_completion("hello", max_tokens=1, stream=True)))
print(time.perf_counter() - started)
"""


async def _cold_ttft_s(url: str) -> float:
    body = {"model": GEMMA_NAME, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4, "stream": True}
    async with httpx.AsyncClient(timeout=300) as client:
        started = time.perf_counter()
        async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: {"):
                    if response.status_code != 200:
                        raise SystemExit(f"cold request failed: {line}")
                    return time.perf_counter() - started
    raise SystemExit("the cold request streamed nothing")


async def _install_alone_s(c: Cluster) -> float:
    conn = await asyncpg.connect(c.database_url)
    node_id = await conn.fetchval("SELECT id FROM backend_nodes LIMIT 1")
    await conn.close()
    nc = await nats.connect(c.nats_url)
    try:
        started = time.perf_counter()
        payload = {"backend": "llama-cpp", "model_id": "install-probe", "replica_index": 0}
        reply = await nc.request(f"nodes.{node_id}.backend.install", json.dumps(payload).encode(), timeout=120)
        elapsed = time.perf_counter() - started
        await nc.publish(f"nodes.{node_id}.backend.stop",
                         json.dumps({"backend": "install-probe#0", "force": True}).encode())
    finally:
        await nc.close()
    if not json.loads(reply.data).get("success"):
        print(f"install probe failed (figure omitted): {reply.data[:200]!r}", file=sys.stderr)
        return float("nan")
    return elapsed


async def _staging_alone_s(c: Cluster, gguf: Path) -> float:
    async with httpx.AsyncClient(timeout=300) as client:
        started = time.perf_counter()
        await stage_file(client, f"http://127.0.0.1:{c.worker_ports[0] - 1}", "models/staging-probe/model.gguf",
                         gguf, c.token)
        return time.perf_counter() - started


async def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="corral-cold-", dir="/var/tmp"))
    root.chmod(0o755)
    pg, nats_server = embedded_postgres(root / "pg"), embedded_nats(root / "nats")
    pg.start()
    nats_server.start()
    c = Cluster(root=root / "stack", database_url=f"{pg.url_base}/postgres", nats_url=nats_server.url)
    try:
        c.models_dir.mkdir(parents=True)
        prepare_gemma(c.models_dir)
        gguf = c.models_dir / GEMMA_FILE
        c.start_frontend()
        c.start_worker("w1")
        explain = httpx.get(f"{c.frontend_url}/api/nodes/scheduling/explain", params={"model": GEMMA_NAME},
                            headers=c.admin_headers, timeout=120)  # the GGUF header read, once, untimed
        explain.raise_for_status()
        cold_s = await _cold_ttft_s(c.frontend_url)
        staging_s = await _staging_alone_s(c, gguf)
        install_s = await _install_alone_s(c)
    finally:
        c.stop()
        nats_server.stop()
        pg.stop(quiet=True)
    load_s = float(subprocess.run([sys.executable, "-c", LOAD_ALONE, str(gguf)], check=True, capture_output=True,
                                  text=True).stdout.strip().splitlines()[-1])
    work_s = staging_s + load_s
    print(f"{'figure':<52} {'seconds':>8}")
    print(f"{'cold: first streamed byte of a fresh model':<52} {cold_s:>8.2f}")
    print(f"{'alone: staging transfer (' + str(gguf.stat().st_size >> 20) + ' MiB)':<52} {staging_s:>8.2f}")
    print(f"{'alone: backend process start (backend.install)':<52} {install_s:>8.2f}")
    print(f"{'alone: llama-cpp load + first token':<52} {load_s:>8.2f}")
    print(f"cold / (staging + load + first token) = {cold_s:.2f} / {work_s:.2f} = x{cold_s / work_s:.2f} "
          "(target <= 1.2)")


if __name__ == "__main__":
    asyncio.run(main())
