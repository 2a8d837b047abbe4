"""Prefix-cache-aware routing: TTFT, cache-hit ratio and throughput per warm-path picker, in one run.

Cluster: embedded PostgreSQL + NATS, 2 frontends, 2 workers, one `simulator` model with 4 replicas
(a scheduling rule, min_replicas 4) whose engine models a KV prefix cache: prefill costs
PROMPT_TOKEN_S per *uncached* prompt token (one prefill at a time per replica, like a compute-bound
GPU), decode OUTPUT_TOKEN_S per token, KV_CACHE_TOKENS of cache per replica with LRU eviction.

For each picker (round_robin, least_loaded, power_of_two, prefix_cache; set on both frontends
through POST /api/nodes/scheduling), two workloads, each with fresh prompts (no cache carry-over):
  multi-turn — CONVERSATIONS conversations of TURNS turns, each opening with one of SYSTEM_PROMPTS
               long shared system prompts; turns alternate between the two frontends;
  skewed     — the same, but HOT_SHARE of the conversations share one hot system prompt and a hot
               opening question (one very hot prefix).
TTFT = time to the first streamed content chunk. The hit ratio is the share of prompt tokens found in
the replica's KV cache, modelled by replaying each replica's requests (X-Corral-Replica header) through
the simulator's own cache model. Throughput = requests / wall time of the workload.

With `--llama [<gemma-3-270m .gguf>]` (default: the packaged Gemma, assembled once) it measures a real llama.cpp backend instead (its prompt cache
keeps the KV of the last prompt, so a shared prefix is not evaluated again): 2 replicas (one per
worker, 1 thread each), LLAMA_CONVERSATIONS conversations of LLAMA_TURNS turns, each opening with a
~650-token context, interleaved in a fixed random order and sent one at a time, round_robin vs prefix_cache.

Run: PYTHONPATH=src python benchmarks/prefix_routing.py [--llama [path/to/gemma-3-270m-q4_k_m.gguf]]
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from corral.backends.simulator import KVCache
from corral.up.embedded import embedded_nats, embedded_postgres
from support.cluster import Cluster

PICKERS = tuple(
    os.environ.get("CORRAL_BENCH_PICKERS", "round_robin,least_loaded,power_of_two,prefix_cache").split(",")
)
GUARD = orjson.loads(os.environ.get("CORRAL_BENCH_RULE", "{}"))  # e.g. {"balance_abs_threshold": 4}
REPLICAS = 4
PROMPT_TOKEN_S = 0.0004  # 2500 prompt tokens/s of prefill per replica
OUTPUT_TOKEN_S = 0.004
KV_CACHE_TOKENS = 6000
KV_BLOCK_TOKENS = 16
MAX_TOKENS = 12
SYSTEM_PROMPTS = 8
SYSTEM_WORDS = 1200
CONVERSATIONS = 24
TURNS = 4
USER_WORDS = 40
CONCURRENCY = 8
HOT_SHARE = 0.75
TOKEN = "bench-token"
GEMMA_CACHE = Path("/var/tmp/corral-bench-models")  # shared with cold_start.py


@dataclass
class Result:
    ttft_s: list[float] = field(default_factory=list)
    hits: int = 0
    prompt_tokens: int = 0
    requests: int = 0
    wall_s: float = 0.0
    per_replica: dict[str, int] = field(default_factory=dict)
    follow_ups: int = 0
    sticky: int = 0  # follow-up turns served by the replica of the previous turn


def words(rng: random.Random, n: int, tag: str) -> str:
    """`n` short words (~7 characters: a 1200-token prompt stays within the 16 KiB the router hashes)."""
    return tag + " " + " ".join(f"w{rng.randrange(100000)}" for _ in range(n - 1))


def conversations(phase: str, skewed: bool) -> list[tuple[str, list[str]]]:
    """(system prompt, user turns) per conversation; prompts are unique to the phase."""
    rng = random.Random(phase)
    systems = [words(rng, SYSTEM_WORDS, f"{phase}s{i}-") for i in range(SYSTEM_PROMPTS)]
    hot_question = words(rng, USER_WORDS, f"{phase}hot-")
    convs = []
    for n in range(CONVERSATIONS):
        hot = skewed and n < CONVERSATIONS * HOT_SHARE
        system = systems[0] if hot else systems[n % SYSTEM_PROMPTS]
        turns = [words(rng, USER_WORDS, f"{phase}c{n}t{t}-") for t in range(TURNS)]
        if hot:
            turns[0] = hot_question
        convs.append((system, turns))
    rng.shuffle(convs)
    return convs


async def turn(
    client: httpx.AsyncClient, url: str, messages: list[dict[str, str]], max_tokens: int = MAX_TOKENS
) -> tuple[float, str, str]:
    body = {"model": "chat", "messages": messages, "max_tokens": max_tokens, "stream": True}
    started = time.perf_counter()
    ttft, text = 0.0, []
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{r.status_code}: {(await r.aread())[:300]!r}")
        replica = r.headers["X-Corral-Replica"]
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            delta = orjson.loads(line[6:])["choices"][0]["delta"].get("content")
            if delta:
                if not ttft:
                    ttft = time.perf_counter() - started
                text.append(delta)
    return ttft, replica, "".join(text)


async def workload(urls: list[str], phase: str, skewed: bool) -> Result:
    result = Result()
    shadow: dict[str, KVCache] = {}
    queue: asyncio.Queue[tuple[int, tuple[str, list[str]]]] = asyncio.Queue()
    for item in enumerate(conversations(phase, skewed)):
        queue.put_nowait(item)

    async def user(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            n, (system, turns) = queue.get_nowait()
            messages = [{"role": "system", "content": system}]
            previous = ""
            for t, question in enumerate(turns):
                messages.append({"role": "user", "content": question})
                ttft, replica, answer = await turn(client, urls[(n + t) % len(urls)], messages)
                messages.append({"role": "assistant", "content": answer})
                tokens = [w for m in messages[:-1] for w in m["content"].split()]
                cache = shadow.setdefault(replica, KVCache(KV_CACHE_TOKENS, KV_BLOCK_TOKENS))
                result.hits += cache.cached(tokens)
                cache.store(tokens + answer.split())
                result.prompt_tokens += len(tokens)
                result.ttft_s.append(ttft)
                result.requests += 1
                result.per_replica[replica] = result.per_replica.get(replica, 0) + 1
                if previous:
                    result.follow_ups += 1
                    result.sticky += previous == replica
                previous = replica

    started = time.perf_counter()
    async with httpx.AsyncClient(timeout=120) as client:
        await asyncio.gather(*(user(client) for _ in range(CONCURRENCY)))
    result.wall_s = time.perf_counter() - started
    return result


def set_policy(
    cluster: Cluster,
    urls: list[str],
    picker: str,
    replicas: int = REPLICAS,
    guard: dict[str, float] | None = None,
) -> None:
    """The rule of `chat` on every frontend (each applies its own write at once; the others follow within 10 s)."""
    for url in urls:
        r = httpx.post(
            f"{url}/api/nodes/scheduling",
            headers=cluster.admin_headers,
            timeout=30,
            json={
                "model_name": "chat",
                "min_replicas": replicas,
                "route_policy": picker,
                **(GUARD if guard is None else guard),
            },
        )
        r.raise_for_status()


async def wait_routable(
    cluster: Cluster, urls: list[str], replicas: int, timeout_s: float, poll_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while not all(routable(cluster, u) == replicas for u in urls):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{replicas} replicas of chat not routable within {timeout_s:g} s")
        await asyncio.sleep(poll_s)


@contextlib.asynccontextmanager
async def bench_cluster(prefix: str) -> AsyncIterator[Cluster]:
    """Own PostgreSQL and NATS, and a cluster on them; everything stopped and removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix=prefix, dir="/var/tmp"))
    os.chmod(root, 0o755)
    pg, nats = embedded_postgres(root / "pg"), embedded_nats(root / "nats")
    pg.start()
    nats.start()
    database_url = await asyncio.to_thread(pg.create_database, "prefix")
    cluster = Cluster(
        root=root, database_url=database_url, nats_url=nats.url, token=TOKEN, fail_on_loop_stalls=False
    )
    cluster.models_dir.mkdir(parents=True)
    try:
        yield cluster
    finally:
        cluster.stop()
        nats.stop()
        pg.stop(quiet=True)
        shutil.rmtree(root, ignore_errors=True)


def routable(cluster: Cluster, url: str) -> int:
    r = httpx.get(
        f"{url}/api/nodes/scheduling/explain",
        params={"model": "chat"},
        headers=cluster.admin_headers,
        timeout=30,
    )
    return len(r.json().get("routing", {}).get("replicas", []))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


LLAMA_CONVERSATIONS = 2
LLAMA_TURNS = 5
LLAMA_SYSTEM = (
    "You are a patient assistant for a small public library. Answer in one short sentence. "
    "The library opens at nine and closes at six on weekdays, and at noon on Saturdays. "
    "Members may borrow up to eight books for three weeks and renew them twice online. "
) * 12


async def llama(gguf: Path) -> None:
    async with bench_cluster("corral-bench-prefix-llama-") as cluster:
        (cluster.models_dir / gguf.name).symlink_to(gguf.resolve())
        (cluster.models_dir / "chat.yaml").write_text(
            f"name: chat\nbackend: llama-cpp\ncontext_size: 2048\nthreads: 1\nparameters:\n  model: {gguf.name}\n"
            'options:\n  - "chat_format:gemma"\n'
        )
        cluster.frontend_env = {
            "LOCALAI_MODEL_SCHEDULING": orjson.dumps([{"model_name": "chat", "min_replicas": 2}]).decode()
        }
        rows: list[tuple[str, list[float], list[float]]] = []
        second = None
        try:
            fast = ("--reconciler-interval", "0.5s", "--expose-node-header")
            cluster.start_frontend(*fast)
            second, url2 = cluster.spawn_frontend("frontend-2", *fast)
            cluster.start_worker("bench-w1")
            cluster.start_worker("bench-w2")
            urls = [cluster.frontend_url, url2]
            await wait_routable(cluster, urls, 2, timeout_s=600, poll_s=1.0)
            set_policy(cluster, urls, "round_robin", 2, guard={})
            async with httpx.AsyncClient(timeout=600) as client:  # page the weights in on both replicas first
                for i in range(4):
                    await turn(client, urls[i % 2], [{"role": "user", "content": "warm up"}], max_tokens=2)
            for picker in ("round_robin", "prefix_cache"):
                set_policy(cluster, urls, picker, 2, guard={})
                rng = random.Random(picker)
                order = [c for c in range(LLAMA_CONVERSATIONS) for _ in range(LLAMA_TURNS)]
                random.Random(7).shuffle(order)
                # llama.cpp's `gemma` chat format drops system messages: the long context opens the first user turn
                chats: list[list[dict[str, str]]] = [[] for _ in range(LLAMA_CONVERSATIONS)]
                first, follow = [], []
                async with httpx.AsyncClient(timeout=600) as client:
                    for i, c in enumerate(order):
                        context = f"[{picker} desk {c}] {LLAMA_SYSTEM}\n" if not chats[c] else ""
                        chats[c].append(
                            {
                                "role": "user",
                                "content": f"{context}Question {rng.randrange(100)}: when can I come?",
                            }
                        )
                        ttft, _, answer = await turn(client, urls[i % 2], chats[c], max_tokens=8)
                        chats[c].append({"role": "assistant", "content": answer})
                        (first if len(chats[c]) == 2 else follow).append(ttft)
                rows.append((picker, first, follow))
                print(f"  {picker} done", file=sys.stderr)
        finally:
            if second is not None:
                second.stop()
    print(
        f"llama.cpp {gguf.name}: 2 replicas (1 thread each) on 2 workers behind 2 frontends; "
        f"{LLAMA_CONVERSATIONS} conversations × {LLAMA_TURNS} turns interleaved, one request at a time"
    )
    print(f"{'picker':<13} {'first-turn TTFT p50':>20} {'follow-up TTFT p50':>19}")
    for picker, first, follow in rows:
        print(
            f"{picker:<13} {statistics.median(first) * 1000:>18.0f}ms {statistics.median(follow) * 1000:>17.0f}ms"
        )
    ratio = statistics.median(rows[0][2]) / statistics.median(rows[1][2])
    print(f"follow-up TTFT p50: round_robin / prefix_cache = {ratio:.1f}x")


async def main() -> None:
    async with bench_cluster("corral-bench-prefix-") as cluster:
        options = (
            f"prompt_token_time_s:{PROMPT_TOKEN_S}",
            f"output_token_time_s:{OUTPUT_TOKEN_S}",
            f"kv_cache_tokens:{KV_CACHE_TOKENS}",
            f"kv_block_tokens:{KV_BLOCK_TOKENS}",
            "prefill_concurrency:1",
        )
        (cluster.models_dir / "chat.yaml").write_text(
            "name: chat\nbackend: simulator\nparameters:\n  model: chat\noptions:\n"
            + "".join(f'  - "{o}"\n' for o in options)
        )
        cluster.frontend_env = {
            "LOCALAI_MODEL_SCHEDULING": orjson.dumps(
                [{"model_name": "chat", "min_replicas": REPLICAS}]
            ).decode()
        }
        results: dict[tuple[str, str], Result] = {}
        second = None
        try:
            fast = ("--reconciler-interval", "0.5s", "--expose-node-header")
            cluster.start_frontend(*fast)
            second, url2 = cluster.spawn_frontend("frontend-2", *fast)
            cluster.start_worker("bench-w1", "--max-replicas-per-model", "2")
            cluster.start_worker("bench-w2", "--max-replicas-per-model", "2")
            urls = [cluster.frontend_url, url2]
            await wait_routable(cluster, urls, REPLICAS, timeout_s=180, poll_s=0.5)
            for picker in PICKERS:
                set_policy(cluster, urls, picker)
                for name, skewed in (("multi-turn", False), ("skewed", True)):
                    results[(picker, name)] = await workload(urls, f"{picker}-{name}", skewed)
                    print(f"  {picker:<13} {name:<10} done", file=sys.stderr)
        finally:
            if second is not None:
                second.stop()
    print(
        f"{REPLICAS} replicas on 2 workers behind 2 frontends; {CONVERSATIONS} conversations × {TURNS} turns, "
        f"{SYSTEM_PROMPTS} system prompts of {SYSTEM_WORDS} tokens, concurrency {CONCURRENCY}; prefill "
        f"{PROMPT_TOKEN_S * 1000:g} ms/uncached token, decode {OUTPUT_TOKEN_S * 1000:g} ms/token, "
        f"KV cache {KV_CACHE_TOKENS} tokens/replica"
    )
    print(
        f"{'workload':<11} {'picker':<13} {'TTFT p50':>9} {'TTFT p99':>9} {'hit ratio':>9} {'req/s':>7}  "
        "sticky  requests per replica"
    )
    for name in ("multi-turn", "skewed"):
        for picker in PICKERS:
            r = results[(picker, name)]
            spread = " ".join(str(v) for _, v in sorted(r.per_replica.items()))
            print(
                f"{name:<11} {picker:<13} {statistics.median(r.ttft_s) * 1000:>7.0f}ms "
                f"{pct(r.ttft_s, 0.99) * 1000:>7.0f}ms {r.hits / r.prompt_tokens:>9.2f} "
                f"{r.requests / r.wall_s:>7.2f} {r.sticky / r.follow_ups:>7.2f}  {spread}"
            )
    if not {"round_robin", "least_loaded", "prefix_cache"} <= set(PICKERS):
        return
    mt = {p: statistics.median(results[(p, "multi-turn")].ttft_s) for p in PICKERS}
    sk = {p: statistics.median(results[(p, "skewed")].ttft_s) for p in PICKERS}
    print(
        f"multi-turn TTFT p50: round_robin / prefix_cache = {mt['round_robin'] / mt['prefix_cache']:.1f}x "
        "(target >= 3x)"
    )
    print(
        f"skewed TTFT p50: prefix_cache / least_loaded = {sk['prefix_cache'] / sk['least_loaded']:.2f} "
        "(target <= 1)"
    )


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "--llama":
        if len(sys.argv) == 3:
            gemma = Path(sys.argv[2])
        else:  # the default model, assembled from its package (no hub download)
            from corral.models.defaults import GEMMA_FILE, prepare_gemma

            prepare_gemma(GEMMA_CACHE)
            gemma = GEMMA_CACHE / GEMMA_FILE
        asyncio.run(llama(gemma))
    else:
        asyncio.run(main())
