"""The `sentencetransformers` gallery backend as the worker runs it: `run.sh --addr` from its installed
directory (own venv: torch CPU + sentence-transformers), called over real gRPC with bearer auth on,
serving the real all-MiniLM-L6-v2 weights from a models directory."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import grpc
import pytest

from corral.models.minilm_gguf import source_dir
from corral.proto import backend_pb2 as pb
from corral.proto import backend_pb2_grpc
from support import st_backend

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # the session builds the backend's venv first

TOKEN = "st-test-token"
IDENTITY = "all-minilm-l6-v2-st"
HEALTH_DEADLINE_S = 60.0
AUTH = (("authorization", f"Bearer {TOKEN}"),)


@dataclass
class Running:
    process: subprocess.Popen[bytes]
    stub: backend_pb2_grpc.BackendStub
    channel: grpc.Channel
    stderr: IO[bytes]

    def log(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def models_dir(state_root: Path) -> Path:
    root = state_root / "st-models"
    root.mkdir(exist_ok=True)
    st_backend.prepare_model(root)
    return root


def _start(directory: Path, models_root: Path, argv_prefix: tuple[str, ...] = ()) -> Running:
    port = _free_port()
    stderr = tempfile.TemporaryFile()
    env = {
        **os.environ,
        "LOCALAI_GRPC_AUTH_TOKEN": TOKEN,
        "CORRAL_BACKEND_MODELS_ROOT": str(models_root),
        "LOCALAI_BACKEND_PARENT_WATCH_INTERVAL": "200ms",
    }
    process = subprocess.Popen(
        [*argv_prefix, str(directory / "run.sh"), "--addr", f"127.0.0.1:{port}"],
        cwd=directory,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    running = Running(process, backend_pb2_grpc.BackendStub(channel), channel, stderr)
    deadline = time.monotonic() + HEALTH_DEADLINE_S
    while time.monotonic() < deadline:
        assert process.poll() is None, f"backend exited with {process.returncode}:\n{running.log()}"
        try:
            if running.stub.Health(pb.HealthMessage(), metadata=AUTH, timeout=2).message == b"OK":
                return running
        except grpc.RpcError:
            time.sleep(0.1)
    _stop(running)
    raise AssertionError(f"backend did not answer Health within {HEALTH_DEADLINE_S}s:\n{running.log()}")


def _stop(running: Running) -> int | None:
    running.channel.close()
    if running.process.poll() is None:
        running.process.send_signal(signal.SIGTERM)
        try:
            running.process.wait(15)
        except subprocess.TimeoutExpired:
            running.process.kill()
            running.process.wait()
    running.stderr.close()
    return running.process.returncode


@pytest.fixture(scope="module")
def backend(st_backends_path: Path, models_dir: Path) -> Iterator[Running]:
    running = _start(st_backends_path / st_backend.NAME, models_dir)
    yield running
    _stop(running)


@pytest.fixture(scope="module")
def loaded(backend: Running, models_dir: Path) -> Running:
    result = backend.stub.LoadModel(
        pb.ModelOptions(Model=IDENTITY, ModelFile=str(models_dir / IDENTITY), ModelPath=str(models_dir)),
        metadata=AUTH,
        timeout=120,
    )
    assert result.success, f"{result.message}\n{backend.log()}"
    return backend


def _embed(running: Running, text: str, identity: str = IDENTITY) -> pb.EmbeddingResult:
    result: pb.EmbeddingResult = running.stub.Embedding(
        pb.PredictOptions(Embeddings=text, ModelIdentity=identity), metadata=AUTH, timeout=60
    )
    return result


def _code(call) -> tuple[grpc.StatusCode, str]:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value.code(), caught.value.details()


# --- before a model is loaded (a second process: the module's backend gets loaded) ---------------------------


def test_auth_refusals_and_an_unloaded_backend(st_backends_path: Path, models_dir: Path) -> None:
    running = _start(st_backends_path / st_backend.NAME, models_dir)
    try:
        code, details = _code(lambda: running.stub.Health(pb.HealthMessage(), timeout=5))
        assert code is grpc.StatusCode.UNAUTHENTICATED and "bearer" in details
        wrong = (("authorization", "Bearer nope"),)
        code, _ = _code(lambda: running.stub.Health(pb.HealthMessage(), metadata=wrong, timeout=5))
        assert code is grpc.StatusCode.UNAUTHENTICATED
        code, details = _code(lambda: _embed(running, "hello"))
        assert code is grpc.StatusCode.FAILED_PRECONDITION and "model not loaded" in details
        status = running.stub.Status(pb.HealthMessage(), metadata=AUTH, timeout=5)
        assert status.state == pb.StatusResponse.UNINITIALIZED

        outside = running.stub.LoadModel(
            pb.ModelOptions(Model="x", ModelFile="/etc"), metadata=AUTH, timeout=30
        )
        assert not outside.success and "outside this worker's models directory" in outside.message
        escape = str(models_dir / ".." / "st-backends")
        dotdot = running.stub.LoadModel(
            pb.ModelOptions(Model="x", ModelFile=escape), metadata=AUTH, timeout=30
        )
        assert not dotdot.success and "ModelFile" in dotdot.message and "outside" in dotdot.message
        missing = running.stub.LoadModel(
            pb.ModelOptions(Model="x", ModelFile=str(models_dir / "no-such-model")), metadata=AUTH, timeout=30
        )
        assert not missing.success and "not a sentence-transformers model directory" in missing.message
        assert running.process.poll() is None  # refusals leave the backend serving
    finally:
        assert _stop(running) == 0


# --- the loaded model -----------------------------------------------------------------------------------------


def test_embeddings_match_sentence_transformers_reference_vectors(loaded: Running) -> None:
    for sentence, expected in st_backend.reference_vectors().items():
        result = _embed(loaded, sentence)
        assert result.dim == 384 == len(result.embeddings)
        assert result.prompt_tokens > 2  # [CLS] … [SEP]
        assert st_backend.cosine(list(result.embeddings), expected) > 0.999


def test_rerank_scores_are_cosine_similarities_best_first(loaded: Running) -> None:
    query = "A man is eating food."
    documents = [
        "The weather is sunny today.",
        "A man is eating a piece of bread.",
        "Stock markets fell sharply.",
        "Someone eats a meal.",
    ]
    result = loaded.stub.Rerank(
        pb.RerankRequest(query=query, documents=documents, ModelIdentity=IDENTITY), metadata=AUTH, timeout=60
    )
    order = [r.index for r in result.results]
    assert sorted(order) == [0, 1, 2, 3]
    assert set(order[:2]) == {1, 3}  # the two about eating outrank weather and markets
    scores = [r.relevance_score for r in result.results]
    assert scores == sorted(scores, reverse=True)
    query_vector = list(_embed(loaded, query).embeddings)
    for r in result.results:
        assert r.text == documents[r.index]
        expected = st_backend.cosine(query_vector, list(_embed(loaded, documents[r.index]).embeddings))
        assert abs(r.relevance_score - expected) < 1e-4
    assert 0 < result.usage.prompt_tokens < result.usage.total_tokens

    top = loaded.stub.Rerank(
        pb.RerankRequest(query=query, documents=documents, top_n=2, ModelIdentity=IDENTITY),
        metadata=AUTH,
        timeout=60,
    )
    assert [r.index for r in top.results] == order[:2]


def test_bad_calls_are_refused_with_their_reason(loaded: Running) -> None:
    code, details = _code(lambda: _embed(loaded, "hello", identity="another-model"))
    assert code is grpc.StatusCode.NOT_FOUND and "model identity mismatch" in details
    rerank = loaded.stub.Rerank
    code, details = _code(
        lambda: rerank(pb.RerankRequest(query="q", ModelIdentity=IDENTITY), metadata=AUTH, timeout=30)
    )
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "document" in details
    code, details = _code(
        lambda: rerank(pb.RerankRequest(query="q", documents=["d"], top_n=-1), metadata=AUTH, timeout=30)
    )
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "top_n" in details
    code, _ = _code(
        lambda: rerank(
            pb.RerankRequest(query="q", documents=["d"], ModelIdentity="other"), metadata=AUTH, timeout=30
        )
    )
    assert code is grpc.StatusCode.NOT_FOUND


def test_token_ids_embed_as_the_text_they_come_from(loaded: Running) -> None:
    vocab = {word: i for i, word in enumerate((source_dir() / "vocab.txt").read_text().splitlines())}
    ids = [
        vocab[word] for word in "[CLS] a cat sat on the mat [SEP]".split()
    ]  # the tokenizer's ids for the text
    by_text = _embed(loaded, "a cat sat on the mat")
    by_ids = loaded.stub.Embedding(
        pb.PredictOptions(EmbeddingTokens=ids, ModelIdentity=IDENTITY), metadata=AUTH, timeout=60
    )  # refused before: "Embedding needs the text"
    assert by_ids.prompt_tokens == by_text.prompt_tokens == len(ids) and by_ids.dim == 384
    assert st_backend.cosine(list(by_ids.embeddings), list(by_text.embeddings)) > 0.99999
    code, details = _code(
        lambda: loaded.stub.Embedding(pb.PredictOptions(EmbeddingTokens=[10**6]), metadata=AUTH, timeout=60)
    )
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "EmbeddingTokens" in details


def test_status_free_and_sigterm(loaded: Running) -> None:
    status = loaded.stub.Status(pb.HealthMessage(), metadata=AUTH, timeout=5)
    assert status.state == pb.StatusResponse.READY and status.memory.total > 0
    assert loaded.stub.Free(pb.HealthMessage(), metadata=AUTH, timeout=30).success
    assert (
        loaded.stub.Status(pb.HealthMessage(), metadata=AUTH, timeout=5).state
        == pb.StatusResponse.UNINITIALIZED
    )
    code, _ = _code(lambda: _embed(loaded, "hello"))
    assert code is grpc.StatusCode.FAILED_PRECONDITION
    log = loaded.log()
    assert _stop(loaded) == 0  # SIGTERM: a graceful stop
    assert "listening on 127.0.0.1" in log and "bearer auth on" in log


def test_the_backend_exits_when_its_parent_goes_away(st_backends_path: Path, models_dir: Path) -> None:
    """Started by a shell that is then killed: reparented, the backend notices within its watch interval."""
    port = _free_port()
    env = {
        **os.environ,
        "LOCALAI_GRPC_AUTH_TOKEN": TOKEN,
        "CORRAL_BACKEND_MODELS_ROOT": str(models_dir),
        "LOCALAI_BACKEND_PARENT_WATCH_INTERVAL": "200ms",
    }
    run_sh = st_backends_path / st_backend.NAME / "run.sh"
    shell = subprocess.Popen(
        [
            "/bin/sh",
            "-c",
            '"$0" --addr "$1" >/dev/null 2>&1 & echo $!; wait',
            str(run_sh),
            f"127.0.0.1:{port}",
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert shell.stdout is not None
    pid = int(shell.stdout.readline())
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        grpc.channel_ready_future(channel).result(timeout=HEALTH_DEADLINE_S)
        stub = backend_pb2_grpc.BackendStub(channel)
        assert stub.Health(pb.HealthMessage(), metadata=AUTH, timeout=5, wait_for_ready=True).message == b"OK"
    finally:
        channel.close()
        shell.kill()
        shell.wait()
        shell.stdout.close()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and _running(pid):
        time.sleep(0.1)
    gone = not _running(pid)
    if not gone:
        os.kill(pid, signal.SIGKILL)
    assert gone, "the orphaned backend kept running"


def _running(pid: int) -> bool:
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
