"""Serving, measured by the field's own benchmark: NVIDIA's aiperf against corral, the engine alone and a Rust
router in front of the same engine, side by side, in one run.

For each engine, at each concurrency (1, 8, 32), aiperf (`aiperf profile`, streamed chat completions, synthetic
prompts of ISL tokens asking for OSL tokens, the Gemma tokenizer, the same prompts on every path) drives three
paths, all three up at once, in ROUNDS rounds (CORRAL_BENCH_SERVING_ROUNDS, 2), each path once a round and the
order reversed every round (alone, router, corral, then corral, router, alone: this machine's load drifts over
minutes, and run one after another the last path paid for it; a row is the median of its rounds):
  alone       — the engine's own OpenAI server: llama-cpp-python's `python -m llama_cpp.server` (the build in
                .venv; requests not interrupted; logits for the last prompt token only, as corral's backend and
                llama.cpp's own server compute them, not its default of every prompt token's; a /health route
                added for the router) on the Gemma 3 270M
                GGUF, or the simulator's (`python -m corral.backends.simulator_openai`);
  corral      — a fresh frontend and one worker (throwaway database on PostgreSQL 127.0.0.1:5432, NATS
                127.0.0.1:4222) serving the same model file with the same engine settings (context, batch,
                threads, chat format; the simulator's options), warmed by one request first;
  vllm-router — `vllm-router` (round robin, one worker URL) in front of the engine's own server.
It prints, per engine, path and concurrency: TTFT p50/p99, inter-token latency p50, request throughput,
output tokens per request and errors, and each path's ratio to the engine alone at the same concurrency
(TTFT and ITL: lower is better; throughput: higher is better). The goal it reports on, and does not assert:
corral within 5% of the engine alone on TTFT and ITL, and ahead of the router.

Both engines serve one request at a time by default (llama-cpp-python's server holds a lock around its model;
corral's Gemma config has parallel 1), so at concurrency 8 and 32 requests queue: TTFT then measures the
queue, and a path's throughput is the engine's. The simulator is given `parallel` slots (SIM_OPTIONS) so its
sequences run side by side, each at its fixed per-token delay.

aiperf lives in its own virtual environment, .venv-bench (scripts/bench-venv.sh; `make bench-serving` makes it
and runs this), with the few packages `llama_cpp.server` needs beyond corral's on its PYTHONPATH. aiperf
tokenizes offline: the Gemma tokenizer is written once from the GGUF's own vocabulary (transformers'
GGUF tokenizer converter; the same ids as llama.cpp's) into /var/tmp/corral-bench-tokenizer.

Options (environment or flags): --engines gemma,simulator; --concurrency 1,8,32; --requests N (per run;
default GEMMA_REQUESTS / SIM_REQUESTS, split between the rounds); --paths alone,corral,vllm-router.
Time on 2 shared cores: the simulator ~8 min; Gemma ~4 min a run at 64 requests (~3 s a request: one llama.cpp
thread, aiperf's own timing loop busy on the other core), so ~40 min for its 9 runs (`--requests 32`: half).
Run: .venv/bin/python benchmarks/serving.py   (needs PostgreSQL, NATS, the `models` extra and .venv-bench)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from corral.models.defaults import GEMMA_CONTEXT_TOKENS, GEMMA_FILE, GEMMA_NAME, prepare_gemma
from corral.runtime.processes import port_open, stop_process
from support.cluster import Cluster, free_port

ROOT = Path(__file__).resolve().parents[1]
BENCH_VENV = Path(os.environ.get("CORRAL_BENCH_VENV", ROOT / ".venv-bench"))
AIPERF = BENCH_VENV / "bin" / "aiperf"
LLAMA_SERVER_DEPS = BENCH_VENV / "llama-server"  # scripts/bench-venv.sh: llama_cpp.server's own extra
MODELS_DIR = Path("/var/tmp/corral-bench-models")
TOKENIZER_DIR = Path("/var/tmp/corral-bench-tokenizer") / GEMMA_NAME
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"

CONCURRENCY = tuple(int(c) for c in os.environ.get("CORRAL_BENCH_SERVING_CONCURRENCY", "1,8,32").split(","))
GEMMA_REQUESTS = int(os.environ.get("CORRAL_BENCH_SERVING_GEMMA_REQUESTS", "64"))
SIM_REQUESTS = int(os.environ.get("CORRAL_BENCH_SERVING_SIM_REQUESTS", "200"))
# rounds per concurrency, each path once a round in alternating order; a path's requests are split between them
ROUNDS = int(os.environ.get("CORRAL_BENCH_SERVING_ROUNDS", "2"))
ISL = int(os.environ.get("CORRAL_BENCH_SERVING_ISL", "64"))  # prompt tokens (Gemma's tokenizer)
GEMMA_OSL = int(os.environ.get("CORRAL_BENCH_SERVING_GEMMA_OSL", "32"))
SIM_OSL = int(os.environ.get("CORRAL_BENCH_SERVING_SIM_OSL", "64"))  # words, one chunk each
# llama.cpp threads for both paths: 1 leaves the second core to aiperf, the frontend and the router
LLAMA_THREADS = int(os.environ.get("CORRAL_BENCH_SERVING_THREADS", "1"))
LLAMA_BATCH = 512  # corral's default n_batch and n_ubatch (backends/llama_cpp.py DEFAULT_BATCH_TOKENS)
SIM_MODEL = "sim"
# a fixed-delay engine: 0.1 ms per prompt token, 5 ms per output token (200 tokens/s a sequence), 32 at once
SIM_OPTIONS = ("prompt_token_time_s:0.0001", "output_token_time_s:0.005", "parallel:32")
PATHS = ("alone", "corral", "vllm-router")
AIPERF_TIMEOUT_S = 900
# for the tokenizer's conversion only: aiperf in offline mode takes --tokenizer as a hub id to find in its cache,
# not as a directory (its `_from_pretrained_local`); given a local path it reads the directory and asks no hub
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}

# `python -m llama_cpp.server` as it is, plus GET /health (vllm-router waits for a worker's /health at startup,
# whatever --health-check-endpoint says; llama_cpp.server has none): off the measured path
LLAMA_SERVER = """
import sys
import llama_cpp.server.__main__ as server
create_app = server.create_app
def with_health(**kwargs):
    app = create_app(**kwargs)
    app.add_api_route("/health", lambda: {"status": "ok"}, methods=["GET"])
    return app
server.create_app = with_health
sys.argv[0] = "llama_cpp.server"
server.main()
"""

# Gemma's tokenizer out of the GGUF's own metadata (vocabulary, scores, special tokens) by transformers' GGUF
# converter: no download. Its GGUF reader imports torch for tensors it does not read here, and .venv-bench has no
# torch (it would be GBs): that one import is given a stand-in. Tokenizes as llama.cpp does (same ids).
TOKENIZER_FROM_GGUF = """
import sys, types
from transformers import PreTrainedTokenizerFast
stand_in = types.ModuleType("torch")
stand_in.__getattr__ = lambda name: object
sys.modules["torch"] = stand_in
import transformers.integrations.gguf.reader
del sys.modules["torch"]
from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer, get_gguf_tokenizer
architecture, vocabulary, config = get_gguf_tokenizer(sys.argv[1])
backend, _ = convert_gguf_tokenizer(architecture, vocabulary)
tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, **config)
tokenizer.save_pretrained(sys.argv[2])
print(f"tokenizer of {architecture}: {len(tokenizer)} tokens, in {sys.argv[2]}")
"""


@dataclass(frozen=True)
class Engine:
    name: str  # gemma | simulator
    model: str  # the name requests use
    requests: int
    osl: int


@dataclass
class Row:
    engine: str
    path: str
    concurrency: int
    ttft_p50: float = float("nan")  # ms
    ttft_p99: float = float("nan")
    itl_p50: float = float("nan")
    rps: float = float("nan")
    out_tokens: float = float("nan")  # output tokens per request (aiperf's count, Gemma's tokenizer)
    ok: int = 0
    errors: int = 0
    note: str = ""


# ---- processes -----------------------------------------------------------------------------------------------


@contextmanager
def _process(name: str, argv: list[str], logs: Path, env: dict[str, str] | None = None) -> Iterator[Path]:
    """Run `argv` with its output in logs/<name>.log until the block ends."""
    log = logs / f"{name}.log"
    with open(log, "wb") as handle:
        popen = subprocess.Popen(
            argv,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    try:
        yield log
        if popen.poll() is not None:
            raise RuntimeError(f"{name} exited with {popen.returncode}:\n{log.read_text()[-3000:]}")
    finally:
        stop_process(popen, 20)


def _wait_ready(url: str, log: Path, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready after {timeout_s} s:\n{log.read_text()[-3000:]}")


def _warm(url: str, model: str) -> None:
    """One short streamed request: a cold load (corral), the first evaluation (both)."""
    body = {"model": model, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4}
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=600)
    if response.status_code != 200:
        raise RuntimeError(f"{url}: warm-up answered {response.status_code}: {response.text[:500]}")


def _llama_server(gguf: Path, port: int, logs: Path) -> Any:
    argv = [
        sys.executable,
        "-c",
        LLAMA_SERVER,
        "--model",
        str(gguf),
        "--model_alias",
        GEMMA_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(GEMMA_CONTEXT_TOKENS),
        "--n_batch",
        str(LLAMA_BATCH),
        "--n_ubatch",
        str(LLAMA_BATCH),
        "--n_threads",
        str(LLAMA_THREADS),
        "--n_threads_batch",
        str(LLAMA_THREADS),
        "--chat_format",
        "gemma",
        "--interrupt_requests",
        "False",  # its default cuts a running stream short when the next request arrives (c > 1: empty answers)
        "--logits_all",
        "False",  # its default computes the vocabulary's logits for every prompt token (2x the prefill on Gemma);
        # corral's backend, as llama.cpp's own server, computes them for the last one only
        "--verbose",
        "False",
    ]
    path = os.pathsep.join(p for p in (str(LLAMA_SERVER_DEPS), os.environ.get("PYTHONPATH", "")) if p)
    return _process("llama-server", argv, logs, env={"PYTHONPATH": path})


def _simulator_server(port: int, logs: Path) -> Any:
    argv = [
        sys.executable,
        "-m",
        "corral.backends.simulator_openai",
        "--port",
        str(port),
        "--model",
        SIM_MODEL,
    ]
    argv += [f"--option={option}" for option in SIM_OPTIONS]
    return _process("simulator-server", argv, logs)


def _router_binary() -> str | None:
    return shutil.which("vllm-router", path=f"{BENCH_VENV / 'bin'}{os.pathsep}{Path(sys.executable).parent}")


def _vllm_router(binary: str, engine_url: str, port: int, logs: Path) -> Any:
    argv = [
        binary,
        "--worker-urls",
        engine_url,
        "--policy",
        "round_robin",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--worker-startup-check-interval",
        "1",
        "--log-level",
        "warning",
    ]
    return _process("vllm-router", argv, logs)


def _model_config(engine: Engine) -> str:
    if engine.name == "gemma":
        return (
            f"name: {GEMMA_NAME}\nbackend: llama-cpp\ncontext_size: {GEMMA_CONTEXT_TOKENS}\n"
            f"threads: {LLAMA_THREADS}\nparameters:\n  model: {GEMMA_FILE}\n"
            "options:\n  - chat_format:gemma\n"
        )
    options = "".join(f"  - {option}\n" for option in SIM_OPTIONS)
    return f"name: {SIM_MODEL}\nbackend: simulator\nparameters:\n  model: {SIM_MODEL}\noptions:\n{options}"


@contextmanager
def _corral(engine: Engine, logs: Path) -> Iterator[str]:
    """A fresh frontend and one worker on a throwaway database, serving `engine`'s model; yields its URL."""
    name = f"corral_bench_serving_{uuid.uuid4().hex[:8]}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    root = Path(tempfile.mkdtemp(prefix="corral-bench-serving-", dir="/var/tmp"))
    cluster = Cluster(
        root=root,
        database_url=f"postgresql://postgres@127.0.0.1:5432/{name}",
        nats_url="nats://127.0.0.1:4222",
        fail_on_loop_stalls=False,
    )
    cluster.models_dir.mkdir(parents=True)
    if engine.name == "gemma":
        try:  # a file, not a symlink: a model path must resolve inside the models directory
            os.link(MODELS_DIR / GEMMA_FILE, cluster.models_dir / GEMMA_FILE)
        except OSError:
            shutil.copy(MODELS_DIR / GEMMA_FILE, cluster.models_dir / GEMMA_FILE)
    (cluster.models_dir / f"{engine.model}.yaml").write_text(_model_config(engine))
    try:
        cluster.start_frontend()
        cluster.start_worker("serving-w1")
        yield cluster.frontend_url
    finally:
        cluster.stop()
        for log in (root / "logs").glob("*.log"):
            shutil.copy(log, logs / f"corral-{engine.name}-{log.name}")
        shutil.rmtree(root, ignore_errors=True)
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def _admin(statement: str) -> None:
    conn = await asyncpg.connect(PG_ADMIN)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


# ---- aiperf --------------------------------------------------------------------------------------------------


def _tokenizer(gguf: Path) -> Path:
    """Gemma's tokenizer as a Hugging Face tokenizer directory, written once from the GGUF."""
    if (TOKENIZER_DIR / "tokenizer.json").is_file():
        return TOKENIZER_DIR
    TOKENIZER_DIR.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="tokenizer-", dir=TOKENIZER_DIR.parent))
    subprocess.run(
        [str(BENCH_VENV / "bin" / "python"), "-c", TOKENIZER_FROM_GGUF, str(gguf), str(scratch)],
        check=True,
        env={**os.environ, **OFFLINE},
    )
    scratch.rename(TOKENIZER_DIR)
    return TOKENIZER_DIR


def _aiperf(
    engine: Engine, path: str, url: str, concurrency: int, tokenizer: Path, artifacts: Path, round_: int
) -> Row:
    out = artifacts / f"{engine.name}-{path}-c{concurrency}-r{round_}"
    argv = [
        str(AIPERF),
        "profile",
        "--model",
        engine.model,
        "--url",
        url,
        "--endpoint-type",
        "chat",
        "--streaming",
        "--concurrency",
        str(concurrency),
        "--request-count",
        str(max(engine.requests // ROUNDS, concurrency)),
        "--warmup-request-count",
        str(concurrency),
        "--tokenizer",
        str(tokenizer),
        "--synthetic-input-tokens-mean",
        str(ISL),
        "--synthetic-input-tokens-stddev",
        "0",
        "--output-tokens-mean",
        str(engine.osl),
        "--use-legacy-max-tokens",  # max_tokens: llama_cpp.server ignores max_completion_tokens (runs to n_ctx)
        "--extra-inputs",
        "temperature:0",  # greedy: the same text, so the same lengths, on every path
        "--random-seed",
        "7",
        "--output-artifact-dir",
        str(out),
        "--ui-type",
        "none",
        "--no-server-metrics",
        "--no-gpu-telemetry",
        "--log-level",
        "warning",
    ]
    started = time.perf_counter()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=AIPERF_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return Row(engine.name, path, concurrency, note=f"aiperf still running after {AIPERF_TIMEOUT_S} s")
    (out / "aiperf.log").parent.mkdir(parents=True, exist_ok=True)
    (out / "aiperf.log").write_text(done.stdout + done.stderr)
    row = Row(engine.name, path, concurrency)
    summary = out / "profile_export_aiperf.json"
    if done.returncode != 0 or not summary.is_file():
        row.note = f"aiperf exit {done.returncode} (log: {out / 'aiperf.log'})"
        return row
    _read_summary(orjson.loads(summary.read_bytes()), row)
    print(
        f"  {engine.name:<9} {path:<11} c={concurrency:<3} round {round_ + 1}: {row.ok} ok, {row.errors} errors, "
        f"{time.perf_counter() - started:.0f} s",
        flush=True,
    )
    return row


def _metric(summary: dict[str, Any], name: str, stat: str) -> float:
    value = summary.get(name)
    if isinstance(value, dict) and isinstance(value.get(stat), int | float):
        return float(value[stat])
    return float("nan")


def _read_summary(summary: dict[str, Any], row: Row) -> None:
    row.ttft_p50 = _metric(summary, "time_to_first_token", "p50")
    row.ttft_p99 = _metric(summary, "time_to_first_token", "p99")
    row.itl_p50 = _metric(summary, "inter_token_latency", "p50")
    row.rps = _metric(summary, "request_throughput", "avg")
    row.out_tokens = _metric(summary, "output_sequence_length", "avg")
    count = _metric(summary, "request_count", "avg")  # the requests that completed without error
    row.ok = 0 if count != count else int(count)
    errors = _metric(summary, "error_request_count", "avg")
    kinds = summary.get("error_summary") or []
    row.errors = int(errors) if errors == errors else sum(int(kind.get("count", 0)) for kind in kinds)
    if kinds:
        row.note = "; ".join(
            f"{kind.get('count')}x {str(kind.get('error_details'))[:80]}" for kind in kinds[:2]
        )


# ---- the run -------------------------------------------------------------------------------------------------


def _run_engine(
    engine: Engine, paths: tuple[str, ...], tokenizer: Path, gguf: Path, artifacts: Path, logs: Path
) -> list[Row]:
    """Every path's stack up at once; per concurrency, ROUNDS rounds of every path, the order reversed each
    round (so a drift of the machine's load weighs on every path alike), each row the rounds' median."""
    rows: list[Row] = []
    router = _router_binary()
    if "vllm-router" in paths and router is None:
        rows += [Row(engine.name, "vllm-router", c, note="not installed") for c in CONCURRENCY]
    with ExitStack() as stack:
        urls: dict[str, str] = {}
        if "alone" in paths or "vllm-router" in paths:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            server = (
                _llama_server(gguf, port, logs) if engine.name == "gemma" else _simulator_server(port, logs)
            )
            _wait_ready(url, stack.enter_context(server))
            _warm(url, engine.model)
            if "alone" in paths:
                urls["alone"] = url
            if "vllm-router" in paths and router is not None:
                router_port = free_port()
                router_url = f"http://127.0.0.1:{router_port}"
                _wait_ready(router_url, stack.enter_context(_vllm_router(router, url, router_port, logs)))
                _warm(router_url, engine.model)
                urls["vllm-router"] = router_url
        if "corral" in paths:
            url = stack.enter_context(_corral(engine, logs))
            _warm(url, engine.model)
            time.sleep(1.0)  # the frontend finds the backend's fast lane meanwhile (routing_overhead.py)
            _warm(url, engine.model)
            urls["corral"] = url
        for concurrency in CONCURRENCY:
            runs: dict[str, list[Row]] = {path: [] for path in urls}
            for round_ in range(ROUNDS):
                for path in list(urls) if round_ % 2 == 0 else list(reversed(urls)):
                    runs[path].append(
                        _aiperf(engine, path, urls[path], concurrency, tokenizer, artifacts, round_)
                    )
            rows += [_median_row(path_runs) for path_runs in runs.values()]
    return rows


def _median_row(runs: list[Row]) -> Row:
    """One row of a path's rounds: each figure's median over the rounds that measured it; counts summed."""

    def median(values: list[float]) -> float:
        measured = [v for v in values if v == v]
        return statistics.median(measured) if measured else float("nan")

    first = runs[0]
    return Row(
        first.engine,
        first.path,
        first.concurrency,
        ttft_p50=median([r.ttft_p50 for r in runs]),
        ttft_p99=median([r.ttft_p99 for r in runs]),
        itl_p50=median([r.itl_p50 for r in runs]),
        rps=median([r.rps for r in runs]),
        out_tokens=median([r.out_tokens for r in runs]),
        ok=sum(r.ok for r in runs),
        errors=sum(r.errors for r in runs),
        note="; ".join(r.note for r in runs if r.note),
    )


def _ratio(value: float, reference: float) -> str:
    if value != value or reference != reference or reference == 0:
        return "-"
    return f"x{value / reference:.2f}"


def _report(rows: list[Row]) -> None:
    alone = {(r.engine, r.concurrency): r for r in rows if r.path == "alone"}
    print()
    print(
        f"{'engine':<9} {'path':<11} {'c':>3} {'TTFT p50':>9} {'TTFT p99':>9} {'ITL p50':>8} {'req/s':>7} "
        f"{'out tok':>7} {'ok':>4} {'err':>4}   {'TTFT50/alone':>12} {'TTFT99/alone':>12} {'ITL/alone':>9} "
        f"{'req/s/alone':>11}"
    )
    for row in sorted(rows, key=lambda r: (r.engine, r.concurrency, PATHS.index(r.path))):
        ref = alone.get((row.engine, row.concurrency))
        ratios = (
            f"{_ratio(row.ttft_p50, ref.ttft_p50):>12} {_ratio(row.ttft_p99, ref.ttft_p99):>12} "
            f"{_ratio(row.itl_p50, ref.itl_p50):>9} {_ratio(row.rps, ref.rps):>11}"
            if ref is not None
            else ""
        )
        print(
            f"{row.engine:<9} {row.path:<11} {row.concurrency:>3} {row.ttft_p50:>9.2f} {row.ttft_p99:>9.2f} "
            f"{row.itl_p50:>8.2f} {row.rps:>7.2f} {row.out_tokens:>7.1f} {row.ok:>4} {row.errors:>4}   {ratios}"
            + (f"  ({row.note})" if row.note else "")
        )
    print("(TTFT and ITL in ms; ratios to the engine alone at the same concurrency)")
    _goal(rows, alone)


def _goal(rows: list[Row], alone: dict[tuple[str, int], Row]) -> None:
    """The goal, reported: corral within 5% of the engine alone on TTFT and ITL p50, and ahead of the router."""
    by_key = {(r.engine, r.path, r.concurrency): r for r in rows}
    for row in rows:
        ref = alone.get((row.engine, row.concurrency))
        if row.path != "corral" or ref is None:
            continue
        ttft, itl = row.ttft_p50 / ref.ttft_p50, row.itl_p50 / ref.itl_p50
        within = "within 5%" if ttft <= 1.05 and itl <= 1.05 else "NOT within 5%"
        router = by_key.get((row.engine, "vllm-router", row.concurrency))
        versus = ""
        if router is not None and router.ttft_p50 == router.ttft_p50:
            ahead = row.ttft_p50 <= router.ttft_p50 and row.itl_p50 <= router.itl_p50
            versus = (
                f"; vs vllm-router: TTFT p50 x{row.ttft_p50 / router.ttft_p50:.2f}, "
                f"ITL p50 x{row.itl_p50 / router.itl_p50:.2f} ({'ahead' if ahead else 'NOT ahead'})"
            )
        print(
            f"goal {row.engine} c={row.concurrency}: corral/alone TTFT p50 x{ttft:.3f}, ITL p50 x{itl:.3f} "
            f"({within}){versus}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument(
        "--engines", default=os.environ.get("CORRAL_BENCH_SERVING_ENGINES", "gemma,simulator")
    )
    parser.add_argument("--paths", default=os.environ.get("CORRAL_BENCH_SERVING_PATHS", ",".join(PATHS)))
    parser.add_argument("--requests", type=int, default=0, help="requests per run (default: per engine)")
    parser.add_argument("--concurrency", default="", help="e.g. 1,8,32")
    args = parser.parse_args()
    global CONCURRENCY
    if args.concurrency:
        CONCURRENCY = tuple(int(c) for c in args.concurrency.split(","))
    paths = tuple(p for p in args.paths.split(",") if p)
    unknown = set(paths) - set(PATHS)
    if unknown:
        raise SystemExit(f"unknown paths {sorted(unknown)}; known: {', '.join(PATHS)}")
    if "corral" in paths and not (port_open("127.0.0.1", 5432) and port_open("127.0.0.1", 4222)):
        raise SystemExit("this benchmark needs PostgreSQL on 127.0.0.1:5432 and NATS on 127.0.0.1:4222")
    if not AIPERF.is_file():
        raise SystemExit(f"aiperf not found at {AIPERF}: run scripts/bench-venv.sh (or `make bench-serving`)")
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    prepare_gemma(MODELS_DIR)
    gguf = MODELS_DIR / GEMMA_FILE
    tokenizer = _tokenizer(gguf)
    work = Path(tempfile.mkdtemp(prefix="corral-bench-serving-", dir="/var/tmp"))
    artifacts, logs = work / "aiperf", work / "logs"
    logs.mkdir(parents=True)
    engines = {
        "gemma": Engine("gemma", GEMMA_NAME, args.requests or GEMMA_REQUESTS, GEMMA_OSL),
        "simulator": Engine("simulator", SIM_MODEL, args.requests or SIM_REQUESTS, SIM_OSL),
    }
    print(
        f"aiperf {ISL} prompt tokens, concurrency {','.join(map(str, CONCURRENCY))}; "
        f"gemma: {engines['gemma'].requests} requests x {GEMMA_OSL} tokens, llama.cpp {LLAMA_THREADS} thread(s); "
        f"simulator: {engines['simulator'].requests} requests x {SIM_OSL} words, {' '.join(SIM_OPTIONS)}; "
        f"artifacts and logs in {work}",
        flush=True,
    )
    rows: list[Row] = []
    for name in args.engines.split(","):
        rows += _run_engine(engines[name], paths, tokenizer, gguf, artifacts, logs)
    _report(rows)


if __name__ == "__main__":
    main()
