"""Time to first token along a conversation, through corral vs. the same engine alone, in one run.

Gemma 3 270M (the packaged default), a conversation of TURNS turns: each turn sends the whole history (every
user message and the answer before it) plus a new user message of about 60 tokens, and asks for ANSWER_TOKENS
greedy tokens, so the prompt grows by ~120 tokens a turn. Each turn's time to first token (the first content
chunk of a streamed chat completion) is measured:
  corral — POST /v1/chat/completions (stream) to a warm replica, once per `cache_prompt` mode (MODES, from
           CORRAL_BENCH_TURNS_MODES; backends/llama_prompt_cache.py): `true` (the default: the cells of the
           history and of the answer before are kept), `exact` (only whole chunks of the history), `false` (each
           prompt evaluated whole: what Gemma did before llama_prompt_cache.py);
  alone  — llama-cpp-python in a process of its own (corral's backend settings: all CPUs, the gemma chat format),
           `create_chat_completion(stream=True)` with its own prefix reuse (as `true`).
Every path replays the same message lists (the first mode's greedy answers), ROUNDS rounds per mode alternating
which of corral and alone goes first. Prints each turn's prompt tokens and median TTFT per mode and alone, and
each mode's ratio to alone; at the first turn nothing can be reused.

Needs PostgreSQL on 127.0.0.1:5432 and NATS on 127.0.0.1:4222, the `models` extra and llama-cpp-python.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from gemma_stack import MODELS_DIR, bench_cluster

from corral.models.defaults import GEMMA_CONTEXT_TOKENS, GEMMA_FILE, GEMMA_NAME, model_yaml, prepare_gemma

MODES = tuple(os.environ.get("CORRAL_BENCH_TURNS_MODES", "true,exact,false").split(","))
TURNS = 8
ROUNDS = 3
ANSWER_TOKENS = 48
QUESTIONS = (
    "I am planning a garden behind an old stone house by the sea, with wind from the west most days.",
    "Which flowers would survive the salt in the air and still bloom for most of the summer months?",
    "The soil is sandy and drains very fast. How should I prepare it before the first planting season?",
    "I would also like a small vegetable patch. Which vegetables grow well next to those flowers there?",
    "How often should I water everything during a dry July, and at what time of the day is it best?",
    "Some neighbours keep bees. Which of the plants we discussed would the bees like the most, and why?",
    "In autumn the storms are strong. What can I do to protect the young plants from the worst of them?",
    "Finally, write me a short plan for the whole first year, season by season, in a few sentences each.",
)

ALONE = """
import json, os, sys, time
from llama_cpp import Llama
threads = os.cpu_count() or 1
llm = Llama(model_path=sys.argv[1], n_ctx=2048, n_threads=threads, n_threads_batch=threads, chat_format="gemma",
            verbose=False)
conversation = json.loads(sys.stdin.read())
out = []
for messages in conversation:
    start = time.perf_counter()
    first = None
    for chunk in llm.create_chat_completion(messages=messages, max_tokens=int(sys.argv[2]), temperature=0.0,
                                            stream=True):
        if first is None and chunk["choices"][0]["delta"].get("content"):
            first = time.perf_counter() - start
    out.append(first)
print(json.dumps(out), flush=True)
"""


def _alone(conversation: list[list[dict[str, str]]]) -> list[float]:
    """Each turn's TTFT from one llama-cpp-python process (loaded once), the turns in order."""
    out = subprocess.run(
        [sys.executable, "-c", ALONE, str(MODELS_DIR / GEMMA_FILE), str(ANSWER_TOKENS)],
        input=json.dumps(conversation),
        capture_output=True,
        text=True,
        check=True,
    )
    return [float(t) for t in json.loads(out.stdout.strip().splitlines()[-1])]


async def _turn(
    client: httpx.AsyncClient, url: str, messages: list[dict[str, str]]
) -> tuple[float, str, int]:
    """(TTFT, the answer, prompt tokens) of one streamed turn through corral."""
    body: dict[str, Any] = {
        "model": GEMMA_NAME,
        "messages": messages,
        "max_tokens": ANSWER_TOKENS,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start, first, text, prompt_tokens = time.perf_counter(), 0.0, "", 0
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            raise SystemExit(f"HTTP {response.status_code}: {(await response.aread())[:300]!r}")
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                prompt_tokens = chunk["usage"]["prompt_tokens"]
            content = chunk["choices"][0].get("delta", {}).get("content") if chunk["choices"] else None
            if content:
                first = first or time.perf_counter() - start
                text += content
    return first, text, prompt_tokens


async def _through(
    client: httpx.AsyncClient, url: str, conversation: list[list[dict[str, str]]]
) -> tuple[list[float], list[int]]:
    results = [await _turn(client, url, messages) for messages in conversation]
    return [r[0] for r in results], [r[2] for r in results]


async def _conversation(client: httpx.AsyncClient, url: str) -> list[list[dict[str, str]]]:
    """The message list of every turn, with corral's greedy answers as the history."""
    history: list[dict[str, str]] = []
    turns = []
    for question in QUESTIONS[:TURNS]:
        messages = [*history, {"role": "user", "content": question}]
        _, answer, _ = await _turn(client, url, messages)
        turns.append(messages)
        history = [*messages, {"role": "assistant", "content": answer}]
    return turns


def _models_dir(mode: str) -> Path:
    """A models directory serving Gemma with `cache_prompt:<mode>` (the file linked from MODELS_DIR)."""
    models = Path(f"/var/tmp/corral-bench-turns-{mode}")
    shutil.rmtree(models, ignore_errors=True)
    models.mkdir(parents=True)
    os.link(MODELS_DIR / GEMMA_FILE, models / GEMMA_FILE)
    options = ("chat_format:gemma", f"cache_prompt:{mode}")
    text = model_yaml(GEMMA_NAME, GEMMA_FILE, context_size=GEMMA_CONTEXT_TOKENS, options=options)
    (models / f"{GEMMA_NAME}.yaml").write_text(text)
    return models


async def main() -> None:
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    prepare_gemma(MODELS_DIR)
    through: dict[str, list[list[float]]] = {}
    alone: list[list[float]] = []
    conversation: list[list[dict[str, str]]] = []
    tokens: list[int] = []
    async with httpx.AsyncClient(timeout=300) as client:
        for mode in MODES:
            async with bench_cluster(f"turns-{mode}", _models_dir(mode)) as cluster:
                url = cluster.frontend_url
                if not conversation:
                    conversation = await _conversation(client, url)  # the cold load too
                else:
                    await _turn(client, url, conversation[0])  # the cold load
                through[mode] = []
                for index in range(ROUNDS):  # alternate which goes first
                    if index % 2:
                        alone.append(_alone(conversation))
                    ttfts, tokens = await _through(client, url, conversation)
                    through[mode].append(ttfts)
                    if not index % 2:
                        alone.append(_alone(conversation))
    print(
        f"Gemma 3 270M, a {TURNS}-turn conversation ({ANSWER_TOKENS}-token greedy answers), time to first token in "
        f"ms, median of {ROUNDS} rounds per mode alternating with alone (alone: median of all {len(alone)}):"
    )
    print(" turn  prompt tokens " + "".join(f"  cache_prompt:{mode:<6}" for mode in MODES) + "     alone")
    medians = {
        mode: [statistics.median(run[t] for run in runs) for t in range(TURNS)]
        for mode, runs in through.items()
    }
    reference = [statistics.median(run[t] for run in alone) for t in range(TURNS)]
    for turn in range(TURNS):
        cells = "".join(
            f"  {medians[mode][turn] * 1000:8.1f} x{medians[mode][turn] / reference[turn]:5.2f}"
            for mode in MODES
        )
        print(f" {turn + 1:4d}  {tokens[turn]:13d}{cells}  {reference[turn] * 1000:8.1f}")
    for mode in MODES:
        ratios = [medians[mode][t] / reference[t] for t in range(1, TURNS)]
        print(
            f"cache_prompt:{mode}: the conversation's TTFT {sum(medians[mode]):.2f} s vs alone {sum(reference):.2f} s "
            f"(x{sum(medians[mode]) / sum(reference):.2f}); turns 2-{TURNS}, median ratio to alone "
            f"x{statistics.median(ratios):.2f}"
        )


if __name__ == "__main__":
    asyncio.run(main())
