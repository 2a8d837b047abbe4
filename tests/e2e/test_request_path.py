"""The whole request path on real parts: frontend + two worker processes + real backend processes."""

from __future__ import annotations

import hashlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import asyncpg
import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from corral.models.defaults import write_tiny_model_config
from support.cluster import Cluster, free_port_pair, spawn
from support.processes import backend_pid

pytestmark = pytest.mark.slow

TINY_DIM = 64  # embedding size of the generated tiny llama model


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    root = state_root / "e2e-request-path"
    c = Cluster(root=root, database_url=make_database(), nats_url=nats_url)
    write_tiny_model_config(c.models_dir, "tiny-chat")
    write_tiny_model_config(c.models_dir, "tiny-embed", embeddings=True)
    (c.models_dir / "sim.yaml").write_text("name: sim\nbackend: simulator\nparameters:\n  model: sim\n")
    try:
        c.start_frontend()
        c.start_worker("w1")
        c.start_worker("w2")
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def client(cluster: Cluster) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=f"{cluster.frontend_url}/v1", api_key="unused", max_retries=0, timeout=120
    ) as sdk:
        yield sdk


async def _replica_rows(cluster: Cluster) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(cluster.database_url)
    try:
        return list(
            await conn.fetch(
                "SELECT m.model_name, m.address, m.state, n.name AS node_name FROM node_models m "
                "JOIN backend_nodes n ON n.id = m.node_id ORDER BY m.model_name"
            )
        )
    finally:
        await conn.close()


def test_chat_completion_returns_text_and_usage(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model="tiny-chat", messages=[{"role": "user", "content": "hello there"}], max_tokens=8, seed=1
    )
    assert reply.object == "chat.completion"
    assert reply.choices[0].message.role == "assistant"
    assert isinstance(reply.choices[0].message.content, str)
    assert reply.usage is not None and reply.usage.prompt_tokens > 0
    assert 0 < reply.usage.completion_tokens <= 8 + 2  # byte-level vocab may finish a multi-byte char
    assert reply.choices[0].finish_reason in ("stop", "length")


def test_streaming_chat_yields_chunks_and_ends(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="tiny-chat",
        messages=[{"role": "user", "content": "count"}],
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    # the role's chunk first, alone (it leaves in the first token's write, as its own event)
    assert chunks[0].choices[0].delta.role == "assistant" and not chunks[0].choices[0].delta.content
    assert chunks[1].choices[0].delta.content
    content = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(content) >= 2
    assert finishes and finishes[-1] in ("stop", "length")
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_completion_returns_text(client: openai.OpenAI) -> None:
    reply = client.completions.create(model="tiny-chat", prompt="The sky is", max_tokens=6)
    assert reply.object == "text_completion"
    assert reply.usage is not None and reply.usage.completion_tokens > 0


def test_embeddings_return_vectors_of_the_model_dimension(client: openai.OpenAI) -> None:
    result = client.embeddings.create(model="tiny-embed", input=["first sentence", "second one"])
    assert [len(d.embedding) for d in result.data] == [TINY_DIM, TINY_DIM]
    assert result.data[0].embedding != result.data[1].embedding


async def test_two_models_in_a_row_land_on_two_different_workers(cluster: Cluster) -> None:
    rows = {r["model_name"]: r for r in await _replica_rows(cluster) if r["state"] == "loaded"}
    assert {"tiny-chat", "tiny-embed"} <= set(rows)
    assert rows["tiny-chat"]["node_name"] != rows["tiny-embed"]["node_name"]


async def test_staged_file_on_the_worker_has_the_source_sha256(cluster: Cluster) -> None:
    rows = {r["model_name"]: r for r in await _replica_rows(cluster)}
    node = rows["tiny-chat"]["node_name"]
    staged = cluster.root / node / "models" / "tiny-chat" / "tiny-chat.gguf"
    source = cluster.models_dir / "tiny-chat.gguf"
    assert hashlib.sha256(staged.read_bytes()).hexdigest() == hashlib.sha256(source.read_bytes()).hexdigest()


async def test_killing_a_backend_process_makes_the_next_request_reload_and_succeed(
    cluster: Cluster, client: openai.OpenAI
) -> None:
    client.chat.completions.create(
        model="tiny-chat", messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    rows = {r["model_name"]: r for r in await _replica_rows(cluster)}
    pid = backend_pid(rows["tiny-chat"]["address"].rpartition(":")[2], cluster.workers)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.3)
    reply = client.chat.completions.create(
        model="tiny-chat", messages=[{"role": "user", "content": "again"}], max_tokens=4
    )
    assert reply.usage is not None and reply.usage.completion_tokens > 0
    rows_after = {r["model_name"]: r for r in await _replica_rows(cluster)}
    assert rows_after["tiny-chat"]["state"] == "loaded"


def test_simulator_model_serves_deterministic_text(client: openai.OpenAI) -> None:
    ask: list[ChatCompletionMessageParam] = [{"role": "user", "content": "one two three"}]
    first = client.chat.completions.create(model="sim", messages=ask, max_tokens=5)
    second = client.chat.completions.create(model="sim", messages=ask, max_tokens=5)
    assert first.choices[0].message.content == second.choices[0].message.content
    assert first.usage is not None and first.usage.completion_tokens == 5


async def test_warm_requests_ride_the_backends_fast_lane_with_the_same_answers(
    cluster: Cluster, client: openai.OpenAI
) -> None:
    assert cluster.frontend is not None
    ask: list[ChatCompletionMessageParam] = [{"role": "user", "content": "ride the lane"}]
    over_grpc = client.chat.completions.create(
        model="sim", messages=ask, max_tokens=6
    )  # the first request to a backend finds its lane
    address = {r["model_name"]: r for r in await _replica_rows(cluster)}["sim"]["address"]
    deadline = time.monotonic() + 10
    while f"fast lane to {address} on port" not in cluster.frontend.log() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert f"fast lane to {address} on port" in cluster.frontend.log()
    over_lane = client.chat.completions.create(model="sim", messages=ask, max_tokens=6)
    assert over_lane.choices[0].message.content == over_grpc.choices[0].message.content
    assert over_lane.usage == over_grpc.usage
    streamed = client.chat.completions.create(model="sim", messages=ask, max_tokens=6, stream=True)
    assert (
        "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
        == over_grpc.choices[0].message.content
    )


def test_unknown_model_is_404_in_the_openai_envelope(cluster: Cluster) -> None:
    response = httpx.post(
        f"{cluster.frontend_url}/v1/chat/completions",
        json={"model": "nope", "messages": [{"role": "user", "content": "x"}]},
    )
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"
    assert "nope" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    "body, field",
    [
        ({"model": "sim"}, "messages"),  # messages missing
        ({"model": "sim", "messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
        ({"model": "sim", "messages": [{"role": "user", "content": "x"}], "max_tokens": -1}, "max_tokens"),
        ({"model": "sim", "messages": [{"role": "user", "content": "x"}], "temperature": 9}, "temperature"),
    ],
)
def test_invalid_chat_body_is_400_naming_the_field(
    cluster: Cluster, body: dict[str, object], field: str
) -> None:
    response = httpx.post(f"{cluster.frontend_url}/v1/chat/completions", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == field and field in error["message"]


def test_non_json_body_is_400(cluster: Cluster) -> None:
    response = httpx.post(
        f"{cluster.frontend_url}/v1/chat/completions",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400
    assert "JSON" in response.json()["error"]["message"]


def test_a_worker_with_a_wrong_token_is_refused_and_exits_nonzero(cluster: Cluster) -> None:
    base = free_port_pair()
    proc = spawn("w-bad", cluster.worker_argv("w-bad", base, token="wrong-token"), cluster.root / "logs")
    code = proc.popen.wait(30)
    assert code != 0
    log = proc.log()
    assert "401" in log and "registration token" in log
    assert "Traceback" not in log


MALFORMED = [
    ("/v1/chat/completions", {"model": ["sim"], "messages": [{"role": "user", "content": "x"}]}),
    ("/v1/chat/completions", {"model": "sim", "messages": "hello"}),
    ("/v1/chat/completions", {"model": "sim", "messages": [{"role": "user", "content": 5}]}),
    ("/v1/chat/completions", {"model": "sim", "messages": []}),
    ("/v1/chat/completions", {"model": "sim", "messages": [{"role": "user"}], "stop": 7}),
    ("/v1/chat/completions", {"model": "sim", "messages": [{"role": "user", "content": "x"}], "n": 0}),
    ("/v1/chat/completions", [1, 2, 3]),
    ("/v1/chat/completions", "just a string"),
    ("/v1/completions", {"model": "sim", "prompt": []}),
    ("/v1/completions", {"model": "sim"}),
    ("/v1/embeddings", {"model": "sim", "input": 42}),
    ("/v1/embeddings", {"model": "sim", "input": ""}),
    ("/v1/embeddings", {"model": "sim", "input": "x", "encoding_format": "int8"}),
    ("/v1/rerank", {"model": "sim", "query": "q", "documents": ["d"]}),  # not a reranking model
    ("/v1/rerank", {"model": "sim", "query": "q", "documents": [], "top_n": -1}),
]


@pytest.mark.parametrize("path, body", MALFORMED)
def test_malformed_bodies_get_a_4xx_naming_the_field_never_a_500(
    cluster: Cluster, path: str, body: object
) -> None:
    response = httpx.post(f"{cluster.frontend_url}{path}", json=body, timeout=30)
    assert 400 <= response.status_code < 500, response.text
    error = response.json()["error"]
    assert error["message"] and "Traceback" not in response.text
