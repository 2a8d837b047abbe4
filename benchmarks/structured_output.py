"""Cost of structured output and of a tool call against plain text, on Gemma 3 270M through corral, in one run.

Three kinds of unary chat request, alternating (this machine's load drifts), to one warm llama.cpp replica:
  text   — a plain chat completion;
  schema — the same prompt with `response_format` json_schema (an object of four typed properties);
  tool   — the same prompt with two tools and `tool_choice: required`.
Each reply's wall time and completion tokens give the time per generated token; the grammar's cost is the
ratio of the medians against plain text (a grammar filters the 262,144-token vocabulary at every step). A
schema is compiled once per distinct text on the frontend and on the backend, so only the first request of a
kind pays that; the `first` column shows it.

Needs PostgreSQL on 127.0.0.1:5432 and NATS on 127.0.0.1:4222, the `models` extra and llama-cpp-python.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import httpx
from gemma_stack import gemma_cluster

from corral.models.defaults import GEMMA_NAME

RUNS = 6
MAX_TOKENS = 48
MESSAGES = [{"role": "user", "content": "Describe the weather and a person in Paris."}]
PERSON = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "age", "colour", "happy"],
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer"},
        "colour": {"enum": ["red", "green", "blue"]},
        "happy": {"type": "boolean"},
    },
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 16},
                    "unit": {"enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city", "unit"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {
                "type": "object",
                "properties": {"zone": {"enum": ["UTC", "CET"]}},
                "required": ["zone"],
            },
        },
    },
]
KINDS: dict[str, dict[str, Any]] = {
    "text": {},
    "schema": {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}}},
    "tool": {"tools": TOOLS, "tool_choice": "required"},
}


async def _one(client: httpx.AsyncClient, url: str, extra: dict[str, Any]) -> tuple[float, int]:
    body = {"model": GEMMA_NAME, "messages": MESSAGES, "max_tokens": MAX_TOKENS, "temperature": 0.0, **extra}
    started = time.perf_counter()
    response = await client.post(f"{url}/v1/chat/completions", json=body)
    elapsed = time.perf_counter() - started
    if response.status_code != 200:
        raise SystemExit(f"HTTP {response.status_code}: {response.text[:300]}")
    return elapsed, int(response.json()["usage"]["completion_tokens"])


async def main() -> None:
    runs: dict[str, list[tuple[float, int]]] = {kind: [] for kind in KINDS}
    first: dict[str, tuple[float, int]] = {}
    async with gemma_cluster("structured") as cluster, httpx.AsyncClient(timeout=300) as client:
        await _one(client, cluster.frontend_url, {})  # the cold load
        for kind, extra in KINDS.items():
            first[kind] = await _one(client, cluster.frontend_url, extra)  # grammars compiled here
        for index in range(RUNS):
            order = list(KINDS) if index % 2 == 0 else list(reversed(KINDS))
            for kind in order:
                runs[kind].append(await _one(client, cluster.frontend_url, KINDS[kind]))
    per_token = {kind: statistics.median(t / max(n, 1) for t, n in values) for kind, values in runs.items()}
    per_request = {kind: statistics.median(t for t, _ in values) for kind, values in runs.items()}
    print(f"Gemma 3 270M, unary chat, greedy, max_tokens {MAX_TOKENS}, {RUNS} alternating runs of each:")
    for kind, values in runs.items():
        tokens = statistics.median(n for _, n in values)
        print(
            f"  {kind:7s} first {first[kind][0] * 1000:7.1f} ms  median {per_request[kind] * 1000:7.1f} ms/request"
            f"  {tokens:4.0f} tokens  {per_token[kind] * 1000:6.2f} ms/token"
        )
    for kind in ("schema", "tool"):
        print(
            f"{kind} / text: x{per_token[kind] / per_token['text']:.2f} per generated token, "
            f"x{per_request[kind] / per_request['text']:.2f} per request"
        )


if __name__ == "__main__":
    asyncio.run(main())
