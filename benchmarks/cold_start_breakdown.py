"""Cold start: first token of a model no worker holds yet, vs. the work itself measured alone.

One run, on this machine, with its own PostgreSQL and NATS (embedded launchers); per round a fresh
frontend and worker (a database of their own; the file's hash sidecar deleted, so the frontend hashes
it at its start, --prehash-models, and the worker has never seen it), Gemma 3 270M
(llama-cpp) staged from the frontend's models directory:
  cold     — POST /v1/chat/completions (stream) for the model: time to the first streamed byte, the worker
             with its default spare llama-cpp process (--backend-prestart, started at boot; the request
             is sent once it is up, as on any worker running for more than a second);
  bare     — the same without either head start: a worker started with --backend-prestart= (the
             backend process starts with the load) and a frontend with --prehash-models=false (it hashes
             the file while it transfers it), both on the same CPUs as the transfer;
  alone    — staging the same file to a fresh key on the worker (the uploader), the backend process
             start (`backend.install` over NATS), and llama-cpp-python's load + first token in a
             process of its own.
Rounds alternate which goes first (the stack or the engine alone); prints the median and every
round of each figure and of cold / (staging + load + first token), the issue's target being ≤ 1.2. The
GGUF header read of placement is done once before the timed request (it is cached per process).
Then the cold request's own timeline, from the frontend's and worker's logs: when the load started,
the file was received, the backend process answered, the model was loaded, the first byte came --
where the cold path spends what it spends beyond the work itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import asyncpg
import httpx
import nats

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from machine import touch_memory

from corral.models.defaults import GEMMA_FILE, GEMMA_NAME, prepare_gemma
from corral.staging.hashing import hash_sidecar_path
from corral.staging.uploader import stage_file
from corral.up.embedded import embedded_nats, embedded_postgres
from support.cluster import Cluster, Proc
from support.waiting import wait_for

# The engine with the settings corral's backend gives it (llama_cpp.py: threads = all CPUs for both
# generation and prompt, the model's context_size, chat format), so "alone" is the same work. With
# llama-cpp-python's own defaults (1 generation thread on 2 CPUs) the first token costs a different
# amount: on a busy 2-CPU machine 2 threads spin at every barrier, ~1-5 s for the first token vs 0.2 s.
LOAD_ALONE = """
import os, sys, time
from llama_cpp import Llama
started = time.perf_counter()  # the engine's work, not the interpreter's start (the backend pays that at install)
threads = os.cpu_count() or 1
llm = Llama(model_path=sys.argv[1], n_ctx=2048, n_threads=threads, n_threads_batch=threads, chat_format="gemma",
            verbose=False)
next(iter(llm.create_chat_completion(messages=[{"role": "user", "content": "hello"}], max_tokens=1, stream=True)))
print(time.perf_counter() - started)
"""


# (label, process, pattern) of the log lines that mark the cold path's steps, in the order they happen.
TIMELINE = (
    ("load job starts (placed)", "frontend", r"corral\.loading\.attempt: loading "),
    ("file received and verified", "worker", r"corral\.staging\.receiver: received .*/gemma"),
    ("backend process answers (install)", "worker", r"backend llama-cpp for gemma.* (ready|took the spare)"),
    ("staging done (frontend)", "frontend", r"corral\.staging\.stager: staged "),
    ("LoadModel done", "frontend", r"corral\.loading\.attempt: model .* loaded on node"),
)
QUIET = ("--log-level", "info")  # the test default (debug) costs CPU the work alone does not pay
LOG_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def _stamp(log: str, pattern: str) -> float | None:
    """Epoch seconds of the first log line matching ``pattern``."""
    for line in log.splitlines():
        stamp = LOG_STAMP.match(line)
        if stamp and re.search(pattern, line):
            return datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return None


def _timeline(c: Cluster, started_at: float, cold_s: float) -> list[tuple[str, float | None]]:
    assert c.frontend is not None
    logs = {"frontend": c.frontend.log(), "worker": c.workers[0].log()}
    steps: list[tuple[str, float | None]] = []
    for label, process, pattern in TIMELINE:
        at = _stamp(logs[process], pattern)
        steps.append((label, None if at is None else at - started_at))
    return [*steps, ("first streamed byte", cold_s)]


async def _cold_ttft_s(url: str, prompt: str = "hello") -> tuple[float, float]:
    """Seconds to the first streamed byte of a request, and the wall-clock time it was sent."""
    body = {
        "model": GEMMA_NAME,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 4,
        "stream": True,
    }
    async with httpx.AsyncClient(timeout=300) as client:
        started_at, started = time.time(), time.perf_counter()
        async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: {"):
                    if response.status_code != 200:
                        raise SystemExit(f"cold request failed: {line}")
                    return time.perf_counter() - started, started_at
    raise SystemExit("the cold request streamed nothing")


async def _install_alone_s(c: Cluster) -> float:
    conn = await asyncpg.connect(c.database_url)
    node_id = await conn.fetchval("SELECT id FROM backend_nodes LIMIT 1")
    await conn.close()
    nc = await nats.connect(c.nats_url)
    try:
        started = time.perf_counter()
        payload = {"backend": "llama-cpp", "model_id": "install-probe", "replica_index": 0}
        reply = await nc.request(
            f"nodes.{node_id}.backend.install", json.dumps(payload).encode(), timeout=120
        )
        elapsed = time.perf_counter() - started
        await nc.publish(
            f"nodes.{node_id}.backend.stop",
            json.dumps({"backend": "install-probe#0", "force": True}).encode(),
        )
    finally:
        await nc.close()
    if not json.loads(reply.data).get("success"):
        print(f"install probe failed (figure omitted): {reply.data[:200]!r}", file=sys.stderr)
        return float("nan")
    return elapsed


async def _staging_alone_s(c: Cluster, gguf: Path) -> float:
    async with httpx.AsyncClient(timeout=300) as client:
        started = time.perf_counter()
        await stage_file(
            client,
            f"http://127.0.0.1:{c.worker_ports[0] - 1}",
            "models/staging-probe/model.gguf",
            gguf,
            c.token,
        )
        return time.perf_counter() - started


def _wait_for_log(proc: Proc, text: str, what: str) -> None:
    wait_for(lambda: text in proc.log(), what, 60)


@dataclass
class Round:
    cold_s: float
    no_spare_s: float
    staging_s: float
    install_s: float
    load_s: float
    warm_s: float
    timeline: list[tuple[str, float | None]]

    @property
    def ratio(self) -> float:
        return self.cold_s / (self.staging_s + self.load_s)

    @property
    def no_spare_ratio(self) -> float:
        return self.no_spare_s / (self.staging_s + self.load_s)


def _load_alone_s(gguf: Path) -> float:
    out = subprocess.run(
        [sys.executable, "-c", LOAD_ALONE, str(gguf)], check=True, capture_output=True, text=True
    )
    return float(out.stdout.strip().splitlines()[-1])


async def _stack_round(root: Path, pg_base: str, nats_url: str, shared_models: Path, index: int) -> Round:
    no_spare = await _no_spare_cold_s(root, pg_base, nats_url, shared_models, index)
    measured = await _spare_round(root, pg_base, nats_url, shared_models, index)
    measured.no_spare_s = no_spare
    return measured


async def _fresh_cluster(root: Path, pg_base: str, nats_url: str, shared_models: Path, name: str) -> Cluster:
    admin = await asyncpg.connect(f"{pg_base}/postgres")
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    hash_sidecar_path(shared_models / GEMMA_FILE).unlink(missing_ok=True)  # the frontend has never hashed it
    stack = root / name
    stack.mkdir()
    (stack / "frontend-models").symlink_to(shared_models)
    return Cluster(root=stack, database_url=f"{pg_base}/{name}", nats_url=nats_url)


async def _no_spare_cold_s(root: Path, pg_base: str, nats_url: str, shared_models: Path, index: int) -> float:
    """The cold request on a worker that keeps no spare process, from a frontend that does not pre-hash."""
    c = await _fresh_cluster(root, pg_base, nats_url, shared_models, f"cold_no_spare_{index}")
    try:
        c.start_frontend(*QUIET, "--prehash-models=false")
        c.start_worker("w1", *QUIET)
        httpx.get(
            f"{c.frontend_url}/api/nodes/scheduling/explain",
            params={"model": GEMMA_NAME},
            headers=c.admin_headers,
            timeout=120,
        ).raise_for_status()
        cold_s, _ = await _cold_ttft_s(c.frontend_url)
    finally:
        c.stop()
        shutil.rmtree(
            c.root, ignore_errors=True
        )  # its pages are reused by the next round (see machine.touch_memory)
    return cold_s


async def _spare_round(root: Path, pg_base: str, nats_url: str, shared_models: Path, index: int) -> Round:
    """One fresh frontend + worker on a database of their own; the model's file known to neither side."""
    gguf = shared_models / GEMMA_FILE
    c = await _fresh_cluster(root, pg_base, nats_url, shared_models, f"cold_round_{index}")
    try:
        c.start_frontend(*QUIET)
        c.start_worker("w1", *QUIET, "--backend-prestart=llama-cpp")
        assert c.frontend is not None
        _wait_for_log(c.workers[0], "for spare:llama-cpp ready", "the worker's spare llama-cpp process")
        _wait_for_log(
            c.frontend, f"pre-hashed {c.models_dir.resolve() / GEMMA_FILE}", "the frontend's pre-hash"
        )
        explain = httpx.get(
            f"{c.frontend_url}/api/nodes/scheduling/explain",
            params={"model": GEMMA_NAME},
            headers=c.admin_headers,
            timeout=120,
        )  # the GGUF header read, once, untimed
        explain.raise_for_status()
        cold_s, started_at = await _cold_ttft_s(c.frontend_url)
        timeline = _timeline(c, started_at, cold_s)
        warm_s, _ = await _cold_ttft_s(c.frontend_url, "hi there")
        staging_s = await _staging_alone_s(c, gguf)
        install_s = await _install_alone_s(c)
    finally:
        c.stop()
        shutil.rmtree(c.root, ignore_errors=True)
    return Round(cold_s, float("nan"), staging_s, install_s, float("nan"), warm_s, timeline)


def _median_row(label: str, values: list[float]) -> str:
    return (
        f"{label:<52} {statistics.median(values):>7.2f}  "
        + " ".join(f"{v:6.2f}" for v in values)
        + f"   spread {max(values) / min(values):4.2f}x"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="corral-cold-", dir="/var/tmp"))
    root.chmod(0o755)
    pg, nats_server = embedded_postgres(root / "pg"), embedded_nats(root / "nats")
    pg.start()
    nats_server.start()
    shared_models = root / "models"
    shared_models.mkdir()
    prepare_gemma(shared_models)
    gguf = shared_models / GEMMA_FILE
    touch_memory(root)
    rounds: list[Round] = []
    try:
        for index in range(args.rounds):
            # Alternate which goes first, the stack or the engine alone: this machine's load drifts.
            load_first = index % 2 == 1
            load_s = _load_alone_s(gguf) if load_first else float("nan")
            measured = await _stack_round(root, pg.url_base, nats_server.url, shared_models, index)
            measured.load_s = load_s if load_first else _load_alone_s(gguf)
            rounds.append(measured)
            print(
                f"round {index + 1}: cold {measured.cold_s:.2f}s (no spare {measured.no_spare_s:.2f}s), staging {measured.staging_s:.2f}s + "
                f"load {measured.load_s:.2f}s -> x{measured.ratio:.2f}",
                flush=True,
            )
    finally:
        nats_server.stop()
        pg.stop(quiet=True)
    size_mib = gguf.stat().st_size >> 20
    print(f"\n{len(rounds)} rounds, load average {os.getloadavg()[0]:.1f}; median, then each round")
    print(_median_row("cold: first streamed byte of a fresh model", [r.cold_s for r in rounds]))
    print(_median_row("cold, bare (no spare process, no pre-hash)", [r.no_spare_s for r in rounds]))
    print(_median_row(f"alone: staging transfer ({size_mib} MiB)", [r.staging_s for r in rounds]))
    print(_median_row("alone: backend process start (backend.install)", [r.install_s for r in rounds]))
    print(_median_row("alone: llama-cpp load + first token", [r.load_s for r in rounds]))
    print(_median_row("warm: first streamed byte of the loaded model", [r.warm_s for r in rounds]))
    print(
        _median_row("cold / (staging + load + first token)", [r.ratio for r in rounds]) + "  (target <= 1.2)"
    )
    print(_median_row("cold, bare / (staging + load + first token)", [r.no_spare_ratio for r in rounds]))
    print(
        "\nthe cold request's timeline (seconds since it was sent; from the logs, 1 ms resolution), per round:"
    )
    for step, (label, _) in enumerate(rounds[0].timeline):
        values = [r.timeline[step][1] for r in rounds]
        print(f"  {label:<50} " + " ".join("     -" if v is None else f"{v:6.2f}" for v in values))


if __name__ == "__main__":
    asyncio.run(main())
