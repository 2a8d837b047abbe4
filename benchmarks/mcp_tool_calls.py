"""MCP tool calls through corral vs. the same MCP call made in-process with the SDK.

In one run, on this machine (embedded PostgreSQL and NATS, a frontend, a zero-delay `simulator` worker,
one agent worker, the test MCP stdio server tests/support/mcp_tools_server.py):
  baseline — the `add` tool called in this process through the agent worker's own session code
             (SessionPool: MCP SDK, stdio round trip to the server subprocess);
  plain    — a warm chat completion of a model without `mcp:` (one model turn);
  agent    — a warm chat completion of a model with `mcp:` whose prompt makes the simulator call `add`:
             two model turns plus one `mcp.tools.execute` NATS round trip to the agent worker.
Prints p50/p99 ms of each (serial requests) and what the agent loop adds: agent − plain − baseline is the
cost of corral's part (NATS request-reply, payload encoding, the loop), against the MCP call itself.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from corral.agents.sessions import SessionPool
from corral.models.mcp import StdioServer
from corral.up.embedded import embedded_nats, embedded_postgres
from support.agent_workers import TOOLS_SERVER, mcp_model_yaml, start_agent_worker
from support.cluster import Cluster

REQUESTS = 200
WARMUP = 20


async def _timed(call: Callable[[], Awaitable[None]]) -> tuple[float, float]:
    for _ in range(WARMUP):
        await call()
    samples = []
    for _ in range(REQUESTS):
        start = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]


async def _baseline() -> tuple[float, float]:
    pool = SessionPool()
    server = StdioServer(name="tools", command=sys.executable, args=(str(TOOLS_SERVER),))

    async def call() -> None:
        text, _ = await pool.call_tool(server, "add", {"a": 2, "b": 3}, 10, "knob")
        assert text == "5"

    try:
        return await _timed(call)
    finally:
        await pool.close_all()


async def _through_corral(url: str) -> tuple[tuple[float, float], tuple[float, float]]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:

        async def plain() -> None:
            r = await client.post(
                "/v1/chat/completions",
                json={"model": "sim", "max_tokens": 4, "messages": [{"role": "user", "content": "hello"}]},
            )
            assert r.status_code == 200

        async def agent() -> None:
            r = await client.post(
                "/v1/chat/completions",
                json={
                    "model": "sim-mcp",
                    "max_tokens": 4,
                    "messages": [{"role": "user", "content": 'call add({"a": 2, "b": 3})'}],
                },
            )
            assert r.json()["choices"][0]["message"]["content"] == "Tool add returned: 5", r.text

        return await _timed(plain), await _timed(agent)


async def _create_db(admin_url: str) -> None:
    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute('CREATE DATABASE "bench"')
    finally:
        await conn.close()


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="corral-bench-mcp-", dir="/var/tmp"))
    root.chmod(0o755)
    pg, nats = embedded_postgres(root / "pg", fsync=False), embedded_nats(root / "nats")
    pg.start()
    nats.start()
    cluster = Cluster(root=root / "cluster", database_url=f"{pg.url_base}/bench", nats_url=nats.url)
    try:
        asyncio.run(_create_db(f"{pg.url_base}/postgres"))
        cluster.models_dir.mkdir(parents=True, exist_ok=True)
        (cluster.models_dir / "sim.yaml").write_text("name: sim\nbackend: simulator\n")
        (cluster.models_dir / "sim-mcp.yaml").write_text(mcp_model_yaml("sim-mcp"))
        cluster.start_frontend()
        cluster.start_worker("w1")
        start_agent_worker(cluster, "agent-1")
        base = asyncio.run(_baseline())
        plain, agent = asyncio.run(_through_corral(cluster.frontend_url))
    finally:
        cluster.fail_on_loop_stalls = False
        cluster.stop()
        nats.stop()
        pg.stop(quiet=True)
    print(f"MCP call in-process (baseline)   p50 {base[0]:6.2f} ms  p99 {base[1]:6.2f} ms")
    print(f"plain chat completion            p50 {plain[0]:6.2f} ms  p99 {plain[1]:6.2f} ms")
    print(f"chat completion with 1 tool call p50 {agent[0]:6.2f} ms  p99 {agent[1]:6.2f} ms")
    added = agent[0] - plain[0] - base[0]
    print(
        f"added by corral around the tool call (p50): {added:.2f} ms; agent/plain ratio {agent[0] / plain[0]:.2f}, "
        f"(agent - plain) / baseline ratio {(agent[0] - plain[0]) / base[0]:.2f}"
    )


if __name__ == "__main__":
    main()
