"""Fairness between tenants sharing one model (issue 25): the router queue's Virtual Token Counter vs FIFO.

One run, on this machine: embedded PostgreSQL + NATS, a frontend with auth on, one worker, one `simulator`
replica whose generations take real time (it serves one request at a time, as llama.cpp's engine lock does).
Two API keys, two tenants:
  light — one client, streaming one request after another (a chat user);
  heavy — FLOOD clients at once, each streaming requests back to back (a batch script someone runs).

Three phases, each PHASE_S long:
  alone  — light only: its time to first token with the model to itself (the reference);
  fair   — light + heavy through the router queue (`--replica-slots 1`: requests wait in the frontend, served
           by VTC between tenants);
  fifo   — the same, with `--replica-slots 1000`: every request goes straight to the replica and waits there in
           arrival order (today's behaviour before the queue: nothing in the frontend decides who goes next).

Prints light's TTFT p50/p99 per phase and each against `alone`, and Jain's fairness index of the tokens served
to the two tenants while both were backlogged (1.0 = equal shares; with FLOOD:1 clients FIFO gives about
(FLOOD+1)²/(2·(FLOOD²+1))). No assertion: a script, run by hand (`python benchmarks/fairness.py`).
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

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from corral.up.embedded import embedded_nats, embedded_postgres
from support.cluster import Cluster

TOKEN = "bench-token"
FLOOD = 8
PHASE_S = float(os.environ.get("FAIRNESS_PHASE_S", "20"))
WORDS = 8  # tokens per answer
TOKEN_TIME_S = 0.01  # per generated token: one request holds the replica ~WORDS × this


@contextlib.asynccontextmanager
async def bench_cluster(slots: int) -> AsyncIterator[tuple[Cluster, dict[str, str]]]:
    root = Path(tempfile.mkdtemp(prefix="corral-fairness-", dir="/var/tmp"))
    os.chmod(root, 0o755)
    pg, nats = embedded_postgres(root / "pg"), embedded_nats(root / "nats")
    pg.start()
    nats.start()
    database_url = await asyncio.to_thread(pg.create_database, "fairness")
    cluster = Cluster(
        root=root, database_url=database_url, nats_url=nats.url, token=TOKEN, fail_on_loop_stalls=False
    )
    cluster.models_dir.mkdir(parents=True)
    (cluster.models_dir / "shared.yaml").write_text(
        "name: shared\nbackend: simulator\nparameters:\n  model: sim\n"
        f'options:\n  - "output_token_time_s:{TOKEN_TIME_S}"\n'
    )
    try:
        cluster.start_frontend("--auth", "--replica-slots", str(slots), "--queue-timeout", "10m")
        cluster.start_worker("w1")
        keys = {}
        async with httpx.AsyncClient(timeout=60) as client:
            for tenant in ("light", "heavy"):
                made = await client.post(
                    f"{cluster.frontend_url}/api/keys",
                    json={"name": tenant, "role": "user", "tenant": tenant},
                    headers=cluster.admin_headers,
                )
                made.raise_for_status()
                keys[tenant] = made.json()["key"]
        yield cluster, keys
    finally:
        cluster.stop()
        nats.stop()
        pg.stop(quiet=True)
        shutil.rmtree(root, ignore_errors=True)


async def one_stream(client: httpx.AsyncClient, url: str, key: str) -> tuple[float, int]:
    """(time to first token, tokens) of one streamed chat request."""
    body = {
        "model": "shared",
        "messages": [{"role": "user", "content": "tell me"}],
        "max_tokens": WORDS,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started, first, tokens = time.perf_counter(), 0.0, 0
    async with client.stream(
        "POST", f"{url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
    ) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = orjson.loads(line[6:])
            if not first and event.get("choices") and event["choices"][0]["delta"].get("content"):
                first = time.perf_counter() - started
            if event.get("usage"):
                tokens = int(event["usage"]["completion_tokens"])
    return first, tokens


async def client_loop(
    client: httpx.AsyncClient, url: str, key: str, until: float, ttfts: list[float], served: list[int]
) -> None:
    while time.perf_counter() < until:
        ttft, tokens = await one_stream(client, url, key)
        ttfts.append(ttft)
        served.append(tokens)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def jain(shares: list[float]) -> float:
    return sum(shares) ** 2 / (len(shares) * sum(s * s for s in shares)) if any(shares) else float("nan")


async def phase(url: str, keys: dict[str, str], flood: bool) -> dict[str, float]:
    light_ttft: list[float] = []
    light_tokens: list[int] = []
    heavy_ttft: list[float] = []
    heavy_tokens: list[int] = []
    limits = httpx.Limits(max_connections=FLOOD + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        await one_stream(client, url, keys["light"])  # warm: the load is not measured
        until = time.perf_counter() + PHASE_S
        loops = [client_loop(client, url, keys["light"], until, light_ttft, light_tokens)]
        if flood:
            loops += [
                client_loop(client, url, keys["heavy"], until, heavy_ttft, heavy_tokens) for _ in range(FLOOD)
            ]
        await asyncio.gather(*loops)
    return {
        "p50": pct(light_ttft, 0.5),
        "p99": pct(light_ttft, 0.99),
        "light_requests": len(light_ttft),
        "jain": jain([float(sum(light_tokens)), float(sum(heavy_tokens))]) if flood else 1.0,
        "light_tokens": sum(light_tokens),
        "heavy_tokens": sum(heavy_tokens),
    }


async def main() -> None:
    results = {}
    async with bench_cluster(slots=1) as (cluster, keys):
        results["alone"] = await phase(cluster.frontend_url, keys, flood=False)
        results["fair"] = await phase(cluster.frontend_url, keys, flood=True)
    async with bench_cluster(slots=1000) as (cluster, keys):
        results["fifo"] = await phase(cluster.frontend_url, keys, flood=True)
    alone = results["alone"]
    print(
        f"light tenant vs heavy tenant ({FLOOD} clients), one replica, {PHASE_S:g} s per phase, {WORDS} tokens each"
    )
    print(
        f"{'phase':<8}{'light TTFT p50 ms':>19}{'p99 ms':>10}{'p99 / alone':>13}{'light reqs':>12}"
        f"{'tokens light/heavy':>20}{'Jain':>7}"
    )
    for name, r in results.items():
        split = "{:.0f}/{:.0f}".format(r["light_tokens"], r["heavy_tokens"])
        print(
            f"{name:<8}{r['p50'] * 1000:>19.1f}{r['p99'] * 1000:>10.1f}{r['p99'] / alone['p99']:>13.2f}"
            f"{r['light_requests']:>12.0f}{split:>20}{r['jain']:>7.3f}"
        )
    print(f"fair p99 vs fifo p99: {results['fair']['p99'] / results['fifo']['p99']:.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
