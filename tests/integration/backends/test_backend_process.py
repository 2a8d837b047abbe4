"""Real backend processes (`python -m corral.backends.main NAME --addr ...`) called over gRPC."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest

if TYPE_CHECKING:
    from llama_cpp import Llama

from corral.proto import backend_pb2 as pb
from corral.proto import backend_pb2_grpc
from support.backend_processes import (
    FAST_RECONNECT,
    SENTINEL,
    Backend,
    backend_command,
    backend_env,
    free_port,
    load,
    rpc_error,
    running_backend,
    wait_healthy,
)


@pytest.fixture(scope="module")
def simulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with running_backend("simulator", tmp_path_factory.mktemp("sim")) as backend:
        yield backend


# ---- simulator -------------------------------------------------------------------------------


def test_simulator_backend_answers_health_ok_quickly(simulator: Backend) -> None:
    assert simulator.stub.Health(pb.HealthMessage(), timeout=5).message == b"OK"
    assert simulator.startup_s < 5


def test_inference_before_any_load_fails_with_failed_precondition(tmp_path: Path) -> None:
    with running_backend("simulator", tmp_path) as backend:
        for call in (backend.stub.Predict, backend.stub.PredictStream, backend.stub.Embedding):
            error = rpc_error(call, pb.PredictOptions(Prompt="hi", Embeddings="hi"))
            assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "model not loaded" in error.details()
        status = backend.stub.Status(pb.HealthMessage(), timeout=5)
        assert status.state == pb.StatusResponse.UNINITIALIZED and status.memory.total > 0


def test_simulator_serves_predict_stream_embedding_and_tokenize_after_load(simulator: Backend) -> None:
    assert load(simulator, "sim-a", Options=["embedding_dim:16"]).success
    stub = simulator.stub
    reply = stub.Predict(
        pb.PredictOptions(Prompt="one two three", Tokens=4, ModelIdentity="sim-a"), timeout=10
    )
    assert (reply.tokens, reply.prompt_tokens, len(reply.message.split())) == (4, 3, 4)
    stream = list(stub.PredictStream(pb.PredictOptions(Prompt="one two three", Tokens=4), timeout=10))
    assert [r.chat_deltas[0].content for r in stream[:-1]] == [r.message.decode() for r in stream[:-1]]
    assert b"".join(r.message for r in stream) == reply.message
    assert (stream[-1].message, stream[-1].tokens, stream[-1].prompt_tokens) == (b"", 4, 3)
    embedding = stub.Embedding(pb.PredictOptions(Embeddings="hello world"), timeout=10)
    assert embedding.dim == len(embedding.embeddings) == 16 and embedding.layout == pb.EMBEDDING_LAYOUT_FINAL
    assert math.isclose(sum(v * v for v in embedding.embeddings), 1.0, rel_tol=1e-5)
    assert stub.TokenizeString(pb.PredictOptions(Prompt="a b c"), timeout=10).length == 3
    assert stub.Status(pb.HealthMessage(), timeout=5).state == pb.StatusResponse.READY


def test_a_request_for_another_model_identity_fails_not_found_with_the_sentinel(simulator: Backend) -> None:
    assert load(simulator, "sim-b").success
    for call in (simulator.stub.Predict, simulator.stub.PredictStream, simulator.stub.TokenizeString):
        error = rpc_error(call, pb.PredictOptions(Prompt="hi", ModelIdentity="someone-else"))
        assert error.code() == grpc.StatusCode.NOT_FOUND
        assert SENTINEL in error.details()
    same = simulator.stub.Predict(pb.PredictOptions(Prompt="hi", ModelIdentity="sim-b"), timeout=10)
    assert same.tokens == 16


def test_a_failed_load_returns_the_real_message_and_predict_then_fails_precondition(
    simulator: Backend,
) -> None:
    result = load(simulator, "sim-c", Options=["load_fail:out of VRAM: needed 12 GiB, have 8 GiB"])
    assert (result.success, result.message) == (False, "out of VRAM: needed 12 GiB, have 8 GiB")
    error = rpc_error(simulator.stub.Predict, pb.PredictOptions(Prompt="hi"))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "out of VRAM" in error.details()
    assert simulator.stub.Status(pb.HealthMessage(), timeout=5).state == pb.StatusResponse.ERROR


def test_free_unloads_the_model_and_keeps_the_process_up(simulator: Backend) -> None:
    assert load(simulator, "sim-d").success
    assert simulator.stub.Free(pb.HealthMessage(), timeout=10).success
    error = rpc_error(simulator.stub.Predict, pb.PredictOptions(Prompt="hi"))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert simulator.stub.Health(pb.HealthMessage(), timeout=5).message == b"OK"
    assert simulator.process.poll() is None


def test_health_stays_responsive_while_a_slow_load_runs(simulator: Backend) -> None:
    with ThreadPoolExecutor(1) as pool:
        loading = pool.submit(load, simulator, "sim-slow", Options=["load_time_s:1.5"])
        time.sleep(0.3)
        started = time.perf_counter()
        assert simulator.stub.Health(pb.HealthMessage(), timeout=5).message == b"OK"
        assert time.perf_counter() - started < 0.5
        assert simulator.stub.Status(pb.HealthMessage(), timeout=5).state == pb.StatusResponse.BUSY
        error = rpc_error(simulator.stub.Predict, pb.PredictOptions(Prompt="hi"))
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert loading.result(timeout=10).success


def test_concurrent_generations_are_served_one_at_a_time(simulator: Backend) -> None:
    assert load(simulator, "sim-e", Options=["output_token_time_s:0.05"]).success
    req = pb.PredictOptions(Prompt="hi", Tokens=4)
    started = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        replies = list(pool.map(lambda _: simulator.stub.Predict(req, timeout=10), range(2)))
    assert time.perf_counter() - started >= 0.4
    assert replies[0].message == replies[1].message


def test_calls_need_the_bearer_token_when_one_is_configured(tmp_path: Path) -> None:
    with running_backend("simulator", tmp_path, token="s3cret") as backend:
        for metadata in ([], [("authorization", "Bearer wrong")], [("authorization", "s3cret")]):
            error = rpc_error(backend.stub.Health, pb.HealthMessage(), metadata=metadata)
            assert error.code() == grpc.StatusCode.UNAUTHENTICATED
        error = rpc_error(backend.stub.PredictStream, pb.PredictOptions(Prompt="x"), metadata=[])
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED
        assert backend.stub.Health(pb.HealthMessage(), timeout=5, metadata=backend.auth()).message == b"OK"
        assert load(backend, "m").success


def test_sigterm_stops_the_backend_cleanly(tmp_path: Path) -> None:
    with running_backend("simulator", tmp_path) as backend:
        backend.process.send_signal(signal.SIGTERM)
        assert backend.process.wait(10) == 0
        assert "stopped" in backend.stderr_text()


def test_the_backend_exits_when_its_parent_dies(tmp_path: Path) -> None:
    port = free_port()
    launcher = textwrap.dedent(
        f"""
        import subprocess, sys, time
        child = subprocess.Popen({backend_command("simulator", port)!r})
        print(child.pid, flush=True)
        time.sleep(600)
        """
    )
    env = backend_env(LOCALAI_BACKEND_PARENT_WATCH_INTERVAL="100ms")
    parent = subprocess.Popen([sys.executable, "-c", launcher], env=env, stdout=subprocess.PIPE)
    assert parent.stdout is not None
    backend_pid = int(parent.stdout.readline())
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=FAST_RECONNECT)
    try:
        wait_healthy(backend_pb2_grpc.BackendStub(channel), parent, [])
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and process_alive(backend_pid):
            time.sleep(0.05)
        assert not process_alive(backend_pid), "backend outlived its parent"
    finally:
        channel.close()
        parent.stdout.close()
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if process_alive(backend_pid):
            os.kill(backend_pid, signal.SIGKILL)


def process_alive(pid: int) -> bool:
    """True if `pid` runs and is not a zombie (an orphan may wait for a reaper that never comes)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["nonsense", "--addr", "127.0.0.1:5"], "llama-cpp, simulator"),
        (["simulator", "--addr", "no-port"], "HOST:PORT"),
        (["simulator"], "--addr"),
    ],
)
def test_bad_command_lines_print_one_line_and_exit_2(argv: list[str], complaint: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "corral.backends.main", *argv], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2
    assert complaint in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr


# ---- llama-cpp -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("llama_cpp")
    from corral.models.tiny_gguf import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny-llama.gguf")


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[Backend]:
    with running_backend("llama-cpp", tmp_path_factory.mktemp("llama")) as backend:
        yield backend


def test_llama_backend_completes_streams_embeds_and_tokenizes_the_tiny_model(
    llama: Backend, tiny_model: Path
) -> None:
    loaded = load(llama, "tiny", ModelFile=str(tiny_model), Embeddings=True, Options=["cache_prompt:false"])
    assert loaded.success, loaded.message
    stub = llama.stub
    req = pb.PredictOptions(Prompt="hello world", Tokens=12, Temperature=0, ModelIdentity="tiny")
    reply = stub.Predict(req, timeout=30)
    assert reply.prompt_tokens > 0 and 0 < reply.tokens <= 12
    stream = list(stub.PredictStream(req, timeout=30))
    assert b"".join(r.message for r in stream) == reply.message
    assert all(r.chat_deltas[0].content == r.message.decode() for r in stream[:-1])
    assert (stream[-1].message, stream[-1].tokens, stream[-1].prompt_tokens) == (
        b"",
        reply.tokens,
        reply.prompt_tokens,
    )
    embedding = stub.Embedding(pb.PredictOptions(Embeddings="hello world", ModelIdentity="tiny"), timeout=30)
    assert embedding.dim == len(embedding.embeddings) > 0
    assert embedding.layout == pb.EMBEDDING_LAYOUT_FINAL and embedding.prompt_tokens > 0
    assert math.isclose(sum(v * v for v in embedding.embeddings), 1.0, rel_tol=1e-4)
    tokens = stub.TokenizeString(pb.PredictOptions(Prompt="hello world"), timeout=30)
    assert tokens.length == len(tokens.tokens) > 0


def test_llama_generation_stops_at_max_tokens_when_eos_is_ignored(llama: Backend, tiny_model: Path) -> None:
    assert load(llama, "tiny-len", ModelFile=str(tiny_model)).success
    req = pb.PredictOptions(Prompt="hello", Tokens=9, Temperature=1.0, IgnoreEOS=True)
    assert llama.stub.Predict(req, timeout=30).tokens == 9
    assert list(llama.stub.PredictStream(req, timeout=30))[-1].tokens == 9


def test_llama_chat_renders_messages_with_the_models_embedded_template(
    llama: Backend, tiny_model: Path
) -> None:
    assert load(llama, "tiny-chat", ModelFile=str(tiny_model)).success
    chat = pb.PredictOptions(
        UseTokenizerTemplate=True,
        Messages=[pb.Message(role="user", content="hello")],
        Tokens=8,
        Temperature=0.7,
        Seed=42,
    )
    rendered = "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"  # the tiny model's ChatML
    expected = llama.stub.TokenizeString(pb.PredictOptions(Prompt=rendered), timeout=30).length
    first = llama.stub.Predict(chat, timeout=30)
    assert first.prompt_tokens == expected
    assert 0 < first.tokens <= 8


def test_llama_load_with_an_unknown_chat_format_lists_the_known_ones(
    llama: Backend, tiny_model: Path
) -> None:
    result = load(llama, "tiny-fmt", ModelFile=str(tiny_model), Options=["chat_format:klingon"])
    assert not result.success
    assert "chat_format:klingon" in result.message and "gemma" in result.message


def test_llama_embedding_needs_the_model_loaded_with_embeddings(llama: Backend, tiny_model: Path) -> None:
    assert load(llama, "tiny-noembed", ModelFile=str(tiny_model)).success
    error = rpc_error(llama.stub.Embedding, pb.PredictOptions(Embeddings="hi"))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "Embeddings=true" in error.details()


def test_llama_load_failures_carry_the_real_cause(llama: Backend, tmp_path: Path) -> None:
    missing = load(llama, "gone", ModelFile=str(tmp_path / "missing.gguf"))
    assert not missing.success and "does not exist" in missing.message
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"not a gguf file at all" * 100)
    bad = load(llama, "bad", ModelFile=str(garbage))
    assert not bad.success and "expected 'GGUF'" in bad.message
    assert llama.process.poll() is None
    error = rpc_error(llama.stub.Predict, pb.PredictOptions(Prompt="hi"))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION


def _logprob_entries(replies: list[pb.Reply]) -> list[dict[str, Any]]:
    return [entry for reply in replies if reply.logprobs for entry in json.loads(reply.logprobs)["content"]]


def _vocab(tiny_model: Path) -> Llama:
    from llama_cpp import Llama

    return Llama(model_path=str(tiny_model), vocab_only=True, verbose=False)


def test_llama_replies_carry_each_tokens_logprob_and_sorted_alternatives_streamed_and_unary(
    llama: Backend, tiny_model: Path
) -> None:
    assert load(llama, "tiny-lp", ModelFile=str(tiny_model), Options=["cache_prompt:false"]).success
    req = pb.PredictOptions(
        Prompt="hello world", Tokens=10, Temperature=0, IgnoreEOS=True, Logprobs=1, TopLogprobs=3
    )
    unary = _logprob_entries([llama.stub.Predict(req, timeout=30)])
    streamed = _logprob_entries(list(llama.stub.PredictStream(req, timeout=30)))
    assert len(unary) == 10  # one entry per generated token
    assert [e["token"] for e in streamed] == [e["token"] for e in unary]
    assert all(
        math.isclose(s["logprob"], u["logprob"], abs_tol=1e-4) for s, u in zip(streamed, unary, strict=True)
    )
    for entry in unary:
        top = [alt["logprob"] for alt in entry["top_logprobs"]]
        assert entry["logprob"] <= 0 and len(top) == 3 and top == sorted(top, reverse=True)
        assert entry["top_logprobs"][0]["token"] == entry["token"]  # greedy: the most likely token
        assert bytes(entry["bytes"]).decode(errors="replace") == entry["token"]
    plain = llama.stub.Predict(pb.PredictOptions(Prompt="hello world", Tokens=4), timeout=30)
    assert plain.logprobs == b""  # not asked: not computed


def test_llama_takes_a_prompt_as_token_ids_and_a_logit_bias_that_bans_the_greedy_token(
    llama: Backend, tiny_model: Path
) -> None:
    assert load(llama, "tiny-ids", ModelFile=str(tiny_model), Options=["cache_prompt:false"]).success
    ids = _vocab(tiny_model).tokenize(b"hello world", add_bos=True, special=True)
    greedy: dict[str, Any] = dict(
        Tokens=6, Temperature=0, IgnoreEOS=True, Logprobs=1
    )  # PredictOptions fields
    by_text = llama.stub.Predict(pb.PredictOptions(Prompt="hello world", **greedy), timeout=30)
    by_ids = llama.stub.Predict(pb.PredictOptions(EmbeddingTokens=ids, **greedy), timeout=30)
    assert (by_ids.message, by_ids.prompt_tokens) == (by_text.message, by_text.prompt_tokens)
    first = json.loads(by_text.logprobs)["content"][0]
    vocab = _vocab(tiny_model)
    same_text = [
        i for i in range(vocab.n_vocab()) if vocab.detokenize([i]) == bytes(first["bytes"])
    ]  # + byte pieces
    bias = json.dumps({str(token): -100 for token in same_text})
    banned = pb.PredictOptions(Prompt="hello world", LogitBias=bias, **greedy)
    assert (
        json.loads(llama.stub.Predict(banned, timeout=30).logprobs)["content"][0]["token"] != first["token"]
    )
    for field, value in (("EmbeddingTokens", [1, 10**6]), ("LogitBias", '{"1": 250}'), ("LogitBias", "[1]")):
        bad: dict[str, Any] = {field: value}  # one PredictOptions field
        error = rpc_error(
            llama.stub.Predict,
            pb.PredictOptions(Prompt="hi" if field != "EmbeddingTokens" else "", Tokens=2, **bad),
        )
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and field in error.details(), error.details()
    assert llama.process.poll() is None


def test_llama_embeds_token_ids_as_it_embeds_the_text_they_come_from(
    llama: Backend, tiny_model: Path
) -> None:
    assert load(llama, "tiny-emb-ids", ModelFile=str(tiny_model), Embeddings=True).success
    ids = _vocab(tiny_model).tokenize(b"hello world")  # what Llama.embed tokenizes the text to
    by_text = llama.stub.Embedding(pb.PredictOptions(Embeddings="hello world"), timeout=30)
    by_ids = llama.stub.Embedding(pb.PredictOptions(EmbeddingTokens=ids), timeout=30)
    assert list(by_ids.embeddings) == list(by_text.embeddings) and by_ids.prompt_tokens == len(ids)
    error = rpc_error(llama.stub.Embedding, pb.PredictOptions(EmbeddingTokens=[-1]))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "EmbeddingTokens" in error.details()
