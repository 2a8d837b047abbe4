"""Cold start: the first answer of a model no worker holds yet, vs. the work itself measured alone.

One run, on this machine, with its own PostgreSQL and NATS (embedded launchers), for each model:
  gemma   — Gemma 3 270M Q4_K_M (chat, llama-cpp, 241 MiB): the first streamed byte of a chat request;
            also the largest model the tests use: the others are MiniLM (44 MiB GGUF, 87 MiB as
            sentence-transformers), Whisper base (145 MB), the Piper voice (63 MB) and generated tiny ones;
  minilm  — all-MiniLM-L6-v2 as GGUF (embeddings, llama-cpp, the model the tests embed with): the whole
            /v1/embeddings answer (it is not streamed).
Per round and model, each on a fresh frontend and worker (a database of their own; the file's hash sidecar
deleted, so the frontend hashes it at its start, --prehash-models; the worker with its default spare
llama-cpp process, --backend-prestart, started at boot, the request sent once it is up):
  cold          — the model staged from the frontend's models directory (HTTP, resumable, verified);
  cold, no staging — the same on a stack in shared-models mode (--distributed-shared-models, the worker's
                  models path is the frontend's): nothing is copied, so this is the cold path without staging;
  bare (--bare) — staged, without either head start: no spare process, no pre-hash;
  alone         — staging the same file to a fresh key on the worker (the uploader), the backend process start
                  (`backend.install` over NATS), and llama-cpp-python's load + first token (Gemma: the first
                  streamed chunk of a chat; MiniLM: the first embedding) in a process of its own, with the
                  settings corral's backend gives the engine.
Rounds alternate which goes first (the stacks or the engine alone): this machine's load drifts. Prints the
median and every round of each figure and the issue's ratios: cold / (staging + load + first token) <= 1.2,
cold without staging / (load + first token) <= 1.1. The GGUF header read of placement is done once before the
timed request (it is cached per process). Then the cold requests' timelines from the frontend's and worker's
logs: when the load started, the file was received, the backend process answered, the model was loaded, the
answer came -- where the cold path spends what it spends beyond the work itself.
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
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import nats

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from machine import touch_memory

from corral.models.defaults import (
    GEMMA_FILE,
    GEMMA_NAME,
    MINILM_FILE,
    MINILM_NAME,
    prepare_gemma,
    prepare_minilm,
)
from corral.staging.hashing import hash_sidecar_path
from corral.staging.uploader import stage_file
from corral.up.embedded import embedded_nats, embedded_postgres
from support.cluster import Cluster, Proc
from support.waiting import wait_for

# The engine with the settings corral's backend gives it (llama_cpp.py: threads = all CPUs for both
# generation and prompt, the model's context_size, chat format; embeddings: n_ubatch = n_batch), so "alone" is
# the same work. With llama-cpp-python's own defaults (1 generation thread on 2 CPUs) the first token costs a
# different amount: on a busy 2-CPU machine 2 threads spin at every barrier, ~1-5 s for the first token vs 0.2 s.
ALONE_PRELUDE = """
import os, sys, time
from llama_cpp import Llama
started = time.perf_counter()  # the engine's work, not the interpreter's start (the backend pays that at install)
threads = os.cpu_count() or 1
"""
GEMMA_ALONE = """
llm = Llama(model_path=sys.argv[1], n_ctx=2048, n_threads=threads, n_threads_batch=threads, chat_format="gemma",
            verbose=False)
next(iter(llm.create_chat_completion(messages=[{"role": "user", "content": "hello"}], max_tokens=1, stream=True)))
print(time.perf_counter() - started)
"""
MINILM_ALONE = """
llm = Llama(model_path=sys.argv[1], n_ctx=512, n_batch=512, n_ubatch=512, n_threads=threads,
            n_threads_batch=threads, embedding=True, verbose=False)
llm.embed("a sentence to embed", normalize=True)
print(time.perf_counter() - started)
"""
QUIET = ("--log-level", "info")  # the test default (debug) costs CPU the work alone does not pay
LOG_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


@dataclass(frozen=True)
class Subject:
    """A model measured: its files, how to ask it cold, and the engine's own work alone."""

    key: str
    name: str
    file: str
    prepare: Callable[[Path], Path]
    alone_code: str
    path: str  # the endpoint asked
    body: Callable[[str], dict[str, Any]]
    answer: str  # what the cold figure times


SUBJECTS = {
    "gemma": Subject(
        "gemma",
        GEMMA_NAME,
        GEMMA_FILE,
        prepare_gemma,
        GEMMA_ALONE,
        "/v1/chat/completions",
        lambda text: {
            "model": GEMMA_NAME,
            "messages": [{"role": "user", "content": text}],
            "max_tokens": 4,
            "stream": True,
        },
        "first streamed byte",
    ),
    "minilm": Subject(
        "minilm",
        MINILM_NAME,
        MINILM_FILE,
        prepare_minilm,
        MINILM_ALONE,
        "/v1/embeddings",
        lambda text: {"model": MINILM_NAME, "input": text},
        "whole embeddings answer",
    ),
}


def _timeline_steps(subject: Subject) -> tuple[tuple[str, str, str], ...]:
    """(label, process, pattern) of the log lines that mark the cold path's steps, in the order they happen."""
    return (
        ("load job starts (placed)", "frontend", r"corral\.loading\.attempt: loading "),
        (
            "backend process answers (install)",
            "worker",
            rf"backend llama-cpp for {subject.name}.* (ready|took the spare)",
        ),
        (
            "file received and verified",
            "worker",
            rf"corral\.staging\.receiver: received .*/{re.escape(subject.file)}",
        ),
        ("staging done (frontend)", "frontend", r"corral\.staging\.stager: (staged|shared models)"),
        ("LoadModel done", "frontend", r"corral\.loading\.attempt: model .* loaded on node"),
    )


def _stamp(log: str, pattern: str) -> float | None:
    """Epoch seconds of the first log line matching ``pattern``."""
    for line in log.splitlines():
        stamp = LOG_STAMP.match(line)
        if stamp and re.search(pattern, line):
            return datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return None


def _timeline(
    subject: Subject, c: Cluster, started_at: float, cold_s: float
) -> list[tuple[str, float | None]]:
    assert c.frontend is not None
    logs = {"frontend": c.frontend.log(), "worker": c.workers[0].log()}
    steps: list[tuple[str, float | None]] = []
    for label, process, pattern in _timeline_steps(subject):
        at = _stamp(logs[process], pattern)
        steps.append((label, None if at is None else at - started_at))
    return [*steps, (subject.answer, cold_s)]


async def _answer_s(subject: Subject, url: str, text: str = "hello") -> tuple[float, float]:
    """Seconds to the answer of a request (a stream's first byte), and the wall-clock time it was sent. Timed on
    a client whose connection is open (a /healthz answered on it): the HTTP library's first request costs the
    client 8-19 ms here (its I/O backend's import, the connection), and the engine alone pays no client."""
    async with httpx.AsyncClient(timeout=300) as client:
        (await client.get(f"{url}/healthz")).raise_for_status()
        started_at, started = time.time(), time.perf_counter()
        async with client.stream("POST", f"{url}{subject.path}", json=subject.body(text)) as response:
            if response.status_code != 200:
                raise SystemExit(f"cold request failed: {(await response.aread())[:500]!r}")
            if not subject.body(text).get("stream"):
                await response.aread()
                return time.perf_counter() - started, started_at
            async for line in response.aiter_lines():
                if line.startswith("data: {"):
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


async def _staging_alone_s(c: Cluster, local: Path) -> float:
    async with httpx.AsyncClient(timeout=300) as client:
        started = time.perf_counter()
        await stage_file(
            client,
            f"http://127.0.0.1:{c.worker_ports[0] - 1}",
            f"models/staging-probe/{local.name}",
            local,
            c.token,
        )
        return time.perf_counter() - started


def _wait_for_log(proc: Proc, text: str, what: str) -> None:
    wait_for(lambda: text in proc.log(), what, 60)


def _load_alone_s(subject: Subject, local: Path) -> float:
    out = subprocess.run(
        [sys.executable, "-c", ALONE_PRELUDE + subject.alone_code, str(local)],
        check=True,
        capture_output=True,
        text=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


@dataclass
class Round:
    cold_s: float = float("nan")
    unstaged_s: float = float("nan")
    bare_s: float = float("nan")
    staging_s: float = float("nan")
    install_s: float = float("nan")
    load_s: float = float("nan")
    warm_s: float = float("nan")
    timeline: list[tuple[str, float | None]] = field(default_factory=list)
    unstaged_timeline: list[tuple[str, float | None]] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.cold_s / (self.staging_s + self.load_s)

    @property
    def unstaged_ratio(self) -> float:
        return self.unstaged_s / self.load_s

    @property
    def bare_ratio(self) -> float:
        return self.bare_s / (self.staging_s + self.load_s)


@dataclass(frozen=True)
class Bench:
    root: Path
    pg_base: str
    nats_url: str
    models: Path

    async def fresh_cluster(self, subject: Subject, name: str) -> Cluster:
        admin = await asyncpg.connect(f"{self.pg_base}/postgres")
        await admin.execute(f'CREATE DATABASE "{name}"')
        await admin.close()
        hash_sidecar_path(self.models / subject.key / subject.file).unlink(missing_ok=True)  # never hashed
        stack = self.root / name
        stack.mkdir()
        (stack / "frontend-models").symlink_to(self.models / subject.key)  # this model only
        return Cluster(root=stack, database_url=f"{self.pg_base}/{name}", nats_url=self.nats_url)

    def explain(self, subject: Subject, c: Cluster) -> None:
        """The GGUF header read of placement, once, untimed."""
        httpx.get(
            f"{c.frontend_url}/api/nodes/scheduling/explain",
            params={"model": subject.name},
            headers=c.admin_headers,
            timeout=120,
        ).raise_for_status()

    async def staged(self, subject: Subject, index: int, into: Round) -> None:
        """The cold request with its file staged, its timeline, a warm one, and staging and install alone."""
        c = await self.fresh_cluster(subject, f"cold_{subject.key}_{index}")
        try:
            c.start_frontend(*QUIET)
            c.start_worker("w1", *QUIET, "--backend-prestart=llama-cpp")
            assert c.frontend is not None
            _wait_for_log(c.workers[0], "for spare:llama-cpp ready", "the worker's spare llama-cpp process")
            _wait_for_log(
                c.frontend, f"pre-hashed {c.models_dir.resolve() / subject.file}", "the frontend's pre-hash"
            )
            self.explain(subject, c)
            into.cold_s, started_at = await _answer_s(subject, c.frontend_url)
            into.timeline = _timeline(subject, c, started_at, into.cold_s)
            into.warm_s, _ = await _answer_s(subject, c.frontend_url, "hi there")
            into.staging_s = await _staging_alone_s(c, self.models / subject.key / subject.file)
            into.install_s = await _install_alone_s(c)
        finally:
            c.stop()
            shutil.rmtree(c.root, ignore_errors=True)  # its pages are reused next (see machine.touch_memory)

    async def unstaged(self, subject: Subject, index: int, into: Round) -> None:
        """The cold request in shared-models mode: the worker loads the frontend's file, nothing is copied."""
        c = await self.fresh_cluster(subject, f"cold_shared_{subject.key}_{index}")
        try:
            c.start_frontend(*QUIET, "--distributed-shared-models")
            c.start_worker("w1", *QUIET, "--backend-prestart=llama-cpp", "--models-path", str(c.models_dir))
            _wait_for_log(c.workers[0], "for spare:llama-cpp ready", "the worker's spare llama-cpp process")
            self.explain(subject, c)
            into.unstaged_s, started_at = await _answer_s(subject, c.frontend_url)
            into.unstaged_timeline = _timeline(subject, c, started_at, into.unstaged_s)
        finally:
            c.stop()
            shutil.rmtree(c.root, ignore_errors=True)

    async def bare(self, subject: Subject, index: int, into: Round) -> None:
        """Staged, on a worker that keeps no spare process, from a frontend that does not pre-hash."""
        c = await self.fresh_cluster(subject, f"cold_bare_{subject.key}_{index}")
        try:
            c.start_frontend(*QUIET, "--prehash-models=false")
            c.start_worker("w1", *QUIET)
            self.explain(subject, c)
            into.bare_s, _ = await _answer_s(subject, c.frontend_url)
        finally:
            c.stop()
            shutil.rmtree(c.root, ignore_errors=True)


def _median_row(label: str, values: list[float]) -> str:
    return (
        f"{label:<52} {statistics.median(values):>7.2f}  "
        + " ".join(f"{v:6.2f}" for v in values)
        + f"   spread {max(values) / min(values):4.2f}x"
    )


def _print_timeline(title: str, timelines: list[list[tuple[str, float | None]]]) -> None:
    print(f"  {title}")
    for step, (label, _) in enumerate(timelines[0]):
        values = [t[step][1] for t in timelines]
        print(f"    {label:<48} " + " ".join("     -" if v is None else f"{v:6.2f}" for v in values))


def _report(subject: Subject, rounds: list[Round], bare: bool) -> None:
    size_mib = (subject_file_bytes[subject.key]) >> 20
    print(f"\n{subject.name} ({size_mib} MiB; cold = {subject.answer}): median, then each round")
    print(_median_row("cold: a fresh model, staged", [r.cold_s for r in rounds]))
    print(_median_row("cold, no staging (shared models)", [r.unstaged_s for r in rounds]))
    if bare:
        print(_median_row("cold, bare (no spare process, no pre-hash)", [r.bare_s for r in rounds]))
    print(_median_row(f"alone: staging transfer ({size_mib} MiB)", [r.staging_s for r in rounds]))
    print(_median_row("alone: backend process start (backend.install)", [r.install_s for r in rounds]))
    print(_median_row("alone: llama-cpp load + first answer", [r.load_s for r in rounds]))
    print(_median_row("warm: the loaded model's answer", [r.warm_s for r in rounds]))
    print(
        _median_row("cold / (staging + load + first answer)", [r.ratio for r in rounds]) + "  (target <= 1.2)"
    )
    print(
        _median_row("cold, no staging / (load + first answer)", [r.unstaged_ratio for r in rounds])
        + "  (target <= 1.1)"
    )
    if bare:
        print(_median_row("cold, bare / (staging + load + first answer)", [r.bare_ratio for r in rounds]))
    print(
        "the cold requests' timelines (seconds since each was sent; from the logs, 1 ms resolution), per round:"
    )
    _print_timeline("staged", [r.timeline for r in rounds])
    _print_timeline("no staging (shared models)", [r.unstaged_timeline for r in rounds])


subject_file_bytes: dict[str, int] = {}


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", default="gemma,minilm", help=f"comma-separated, of {', '.join(SUBJECTS)}")
    parser.add_argument("--bare", action="store_true", help="also the staged cold start without head starts")
    args = parser.parse_args()
    subjects = [SUBJECTS[key] for key in args.models.split(",")]
    root = Path(tempfile.mkdtemp(prefix="corral-cold-", dir="/var/tmp"))
    root.chmod(0o755)
    pg, nats_server = embedded_postgres(root / "pg"), embedded_nats(root / "nats")
    pg.start()
    nats_server.start()
    models = root / "models"
    models.mkdir()
    for subject in subjects:
        (models / subject.key).mkdir()
        subject.prepare(models / subject.key)
        subject_file_bytes[subject.key] = (models / subject.key / subject.file).stat().st_size
    touch_memory(root)
    bench = Bench(root, pg.url_base, nats_server.url, models)
    results: dict[str, list[Round]] = {subject.key: [] for subject in subjects}
    try:
        for index in range(args.rounds):
            for subject in subjects:
                measured, local = Round(), models / subject.key / subject.file
                load_first = index % 2 == 1  # alternate which goes first: this machine's load drifts
                if load_first:
                    measured.load_s = _load_alone_s(subject, local)
                if args.bare:
                    await bench.bare(subject, index, measured)
                await bench.unstaged(subject, index, measured)
                await bench.staged(subject, index, measured)
                if not load_first:
                    measured.load_s = _load_alone_s(subject, local)
                results[subject.key].append(measured)
                print(
                    f"round {index + 1} {subject.key}: cold {measured.cold_s:.2f}s, no staging "
                    f"{measured.unstaged_s:.2f}s; staging {measured.staging_s:.2f}s, load + first answer "
                    f"{measured.load_s:.2f}s -> x{measured.ratio:.2f} staged, x{measured.unstaged_ratio:.2f} "
                    "without staging",
                    flush=True,
                )
    finally:
        nats_server.stop()
        pg.stop(quiet=True)
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n{args.rounds} rounds, load average {os.getloadavg()[0]:.1f}")
    for subject in subjects:
        _report(subject, results[subject.key], args.bare)


if __name__ == "__main__":
    asyncio.run(main())
