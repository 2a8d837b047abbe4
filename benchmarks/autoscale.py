"""Autoscaling on load (issue 25 item 5): a load step, the time to the new replica, and time to first token
before and after it, against the same step on fixed replicas.

One run, on this machine: embedded PostgreSQL + NATS, a frontend (`--replica-slots 1`: one request per replica
at once, the rest wait in the router queue), one worker with room for two replicas, a `simulator` model whose
answers take real time and whose load takes LOAD_TIME_S (as a real checkpoint would).

Two clusters, each through the same script:
  autoscaled — rule min 1, max 2, target_queue_wait_s TARGET_S (reconciler every RECONCILE_S);
  fixed      — rule min 1, max 1: the replicas an operator fixed beforehand.
Phases: BASE_S with one client streaming back to back (TTFT at rest), then the step: STEP_CLIENTS clients for
STEP_S. Prints the time from the step to the second replica being loaded (autoscaled), each phase's TTFT p50/p95
(the step split at the moment the replica arrived: before / after), and the autoscaled step's TTFT p95 after the
new replica against the fixed one's over the same part of the step. No assertion: a script, run by hand
(`python benchmarks/autoscale.py`; AUTOSCALE_STEP_S to lengthen the step).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from corral.up.embedded import embedded_nats, embedded_postgres
from support.cluster import Cluster

MODEL = "stepped"
WORDS = 10  # tokens per answer
TOKEN_TIME_S = 0.02  # per generated token: one request holds its replica ~0.2 s
LOAD_TIME_S = 1.0
TARGET_S = 0.3
RECONCILE_S = "1s"
BASE_S = float(os.environ.get("AUTOSCALE_BASE_S", "5"))
STEP_S = float(os.environ.get("AUTOSCALE_STEP_S", "25"))
STEP_CLIENTS = 4
# every request has the same prompt: prefix-cache routing (the default) would keep them all on the replica that
# holds that prefix, and the new replica would idle; least loaded spreads them, as distinct prompts would
ROUTE = {"route_policy": "least_loaded"}


@contextlib.asynccontextmanager
async def bench_cluster(rule: dict[str, Any]) -> AsyncIterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="corral-autoscale-", dir="/var/tmp"))
    os.chmod(root, 0o755)
    pg, nats = embedded_postgres(root / "pg"), embedded_nats(root / "nats")
    pg.start()
    nats.start()
    database_url = await asyncio.to_thread(pg.create_database, "autoscale")
    cluster = Cluster(root=root, database_url=database_url, nats_url=nats.url, fail_on_loop_stalls=False)
    cluster.models_dir.mkdir(parents=True)
    (cluster.models_dir / f"{MODEL}.yaml").write_text(
        f"name: {MODEL}\nbackend: simulator\nparameters:\n  model: sim\noptions:\n"
        f'  - "output_token_time_s:{TOKEN_TIME_S}"\n  - "load_time_s:{LOAD_TIME_S}"\n'
    )
    try:
        cluster.start_frontend(
            "--replica-slots", "1", "--reconciler-interval", RECONCILE_S, "--load-report-interval", "0.5s"
        )
        cluster.start_worker("w1", "--max-replicas-per-model", "2")
        async with httpx.AsyncClient(timeout=60) as client:
            made = await client.post(
                f"{cluster.frontend_url}/api/nodes/scheduling",
                json={"model_name": MODEL, **rule},
                headers=cluster.admin_headers,
            )
            made.raise_for_status()
            while await replicas(client, cluster) < 1:
                await asyncio.sleep(0.2)
        yield cluster
    finally:
        cluster.stop()
        nats.stop()
        pg.stop(quiet=True)
        shutil.rmtree(root, ignore_errors=True)


async def replicas(client: httpx.AsyncClient, cluster: Cluster) -> int:
    rule = await client.get(
        f"{cluster.frontend_url}/api/nodes/scheduling/{MODEL}", headers=cluster.admin_headers
    )
    return int(rule.json()["status"].get("replicas", 0))


async def one_stream(client: httpx.AsyncClient, url: str) -> float:
    """Time to the first token of one streamed chat request."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "go"}],
        "max_tokens": WORDS,
        "stream": True,
    }
    started, first = time.perf_counter(), float("nan")
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():  # read to the end: the replica is busy until then
            if first != first and line.startswith("data: ") and line != "data: [DONE]":
                event = orjson.loads(line[6:])
                if event.get("choices") and event["choices"][0]["delta"].get("content"):
                    first = time.perf_counter() - started
    return first


async def client_loop(
    client: httpx.AsyncClient, url: str, until: float, samples: list[tuple[float, float]]
) -> None:
    while time.perf_counter() < until:
        started = time.perf_counter()
        samples.append((started, await one_stream(client, url)))


async def watch(client: httpx.AsyncClient, cluster: Cluster, until: float) -> float | None:
    """When the second replica was loaded (None: never within the step)."""
    while time.perf_counter() < until:
        if await replicas(client, cluster) >= 2:
            return time.perf_counter()
        await asyncio.sleep(0.1)
    return None


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def run(cluster: Cluster) -> dict[str, Any]:
    url = cluster.frontend_url
    async with httpx.AsyncClient(
        timeout=600, limits=httpx.Limits(max_connections=STEP_CLIENTS + 4)
    ) as client:
        base: list[tuple[float, float]] = []
        await client_loop(client, url, time.perf_counter() + BASE_S, base)
        step: list[tuple[float, float]] = []
        start = time.perf_counter()
        until = start + STEP_S
        loops = [client_loop(client, url, until, step) for _ in range(STEP_CLIENTS)]
        arrived, *_ = await asyncio.gather(watch(client, cluster, until), *loops)
    return {"base": [t for _, t in base], "step": step, "start": start, "arrived": arrived}


def split(step: list[tuple[float, float]], at: float) -> tuple[list[float], list[float]]:
    return [t for s, t in step if s < at], [t for s, t in step if s >= at]


def row(name: str, values: list[float]) -> None:
    print(f"{name:<34}{pct(values, 0.5) * 1000:>10.0f}{pct(values, 0.95) * 1000:>10.0f}{len(values):>8}")


async def main() -> None:
    async with bench_cluster(
        {**ROUTE, "min_replicas": 1, "max_replicas": 2, "target_queue_wait_s": TARGET_S, "cooldown_s": 1}
    ) as cluster:
        auto = await run(cluster)
    async with bench_cluster({**ROUTE, "min_replicas": 1, "max_replicas": 1}) as cluster:
        fixed = await run(cluster)
    arrived = auto["arrived"]
    cut = arrived if arrived is not None else auto["start"] + STEP_S
    offset = cut - auto["start"]  # the same part of the fixed cluster's step
    auto_before, auto_after = split(auto["step"], cut)
    fixed_before, fixed_after = split(fixed["step"], fixed["start"] + offset)
    print(
        f"load step: 1 → {STEP_CLIENTS} streaming clients, one request per replica at once, {WORDS} tokens of "
        f"{TOKEN_TIME_S * 1000:g} ms, load {LOAD_TIME_S:g} s, target queue wait {TARGET_S:g} s, reconciler {RECONCILE_S}"
    )
    print(
        "time from the step to the new replica: "
        + (f"{offset:.2f} s" if arrived is not None else f"not within the {STEP_S:g} s step")
    )
    print(f"{'TTFT':<34}{'p50 ms':>10}{'p95 ms':>10}{'n':>8}")
    row("autoscaled: at rest", auto["base"])
    row("autoscaled: step, before replica", auto_before)
    row("autoscaled: step, after replica", auto_after)
    row("fixed 1 replica: at rest", fixed["base"])
    row("fixed 1 replica: step, same start", fixed_before)
    row("fixed 1 replica: step, same end", fixed_after)
    ratio = pct(auto_after, 0.95) / pct(fixed_after, 0.95)
    print(f"TTFT p95 after the new replica, autoscaled / fixed over the same window: {ratio:.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
