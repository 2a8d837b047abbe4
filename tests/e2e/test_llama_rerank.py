"""A cross-encoder reranker through the whole stack: frontend, worker, and the in-tree llama-cpp backend with
llama.cpp's rank pooling, on `/v1/rerank` (the Jina shape).

No cross-encoder weights are packaged on the registries these machines reach, so the model is generated
(`tiny_reranker`: a small BERT with a seeded random classifier head). Its scores mean nothing, but they are
deterministic, so the order through corral is checked against the same engine run alone in this process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from corral.models.tiny_gguf import write_tiny_llama
from corral.models.tiny_reranker import write_tiny_reranker
from corral.proto import backend_pb2 as pb
from support.cluster import Cluster

pytest.importorskip("llama_cpp")  # at import, not in a test: llama_cpp opens /dev/null when imported
from corral.backends.llama_cpp import LlamaCppEngine

pytestmark = pytest.mark.slow

RERANKER, TEXT = "tiny-rerank", "tiny-text"
QUERY = "what animal jumps over the dog"
DOCUMENTS = [
    "the quick brown fox jumps over the lazy dog",
    "corral serves language models over grpc",
    "paris is the capital of france",
    "a cold rain in berlin",
    "the cat is a pet",
    "dogs bark when it is cold",
]


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = Cluster(root=state_root / "e2e-llama-rerank", database_url=make_database(), nats_url=nats_url)
    c.models_dir.mkdir(parents=True, exist_ok=True)
    write_tiny_reranker(c.models_dir / "tiny-rerank.gguf")
    write_tiny_llama(c.models_dir / "tiny.gguf")
    (c.models_dir / f"{RERANKER}.yaml").write_text(
        f"name: {RERANKER}\nbackend: llama-cpp\nreranking: true\ncontext_size: 512\nparameters:\n"
        "  model: tiny-rerank.gguf\n"
    )
    (c.models_dir / f"{TEXT}.yaml").write_text(
        f"name: {TEXT}\nbackend: llama-cpp\ncontext_size: 512\nparameters:\n  model: tiny.gguf\n"
    )
    yield from c.serving("w1")


@pytest.fixture(scope="module")
def alone(cluster: Cluster) -> Iterator[LlamaCppEngine]:
    """The same model file on the same engine, in this process."""
    engine = LlamaCppEngine()
    engine.load(
        pb.ModelOptions(
            Model=RERANKER,
            ModelFile=str(cluster.models_dir / "tiny-rerank.gguf"),
            ContextSize=512,
            Reranking=True,
        )
    )
    yield engine
    engine.free()


def _rerank(cluster: Cluster, **body: Any) -> httpx.Response:
    return httpx.post(f"{cluster.frontend_url}/v1/rerank", json={"model": RERANKER, **body}, timeout=120)


def test_the_order_through_corral_is_the_engines_own(cluster: Cluster, alone: LlamaCppEngine) -> None:
    response = _rerank(cluster, query=QUERY, documents=DOCUMENTS)
    assert response.status_code == 200, response.text
    body = response.json()
    expected = alone.rerank(pb.RerankRequest(query=QUERY, documents=DOCUMENTS))
    assert body["model"] == RERANKER
    assert [r["index"] for r in body["results"]] == [r.index for r in expected.results]
    assert [r["relevance_score"] for r in body["results"]] == pytest.approx(
        [r.relevance_score for r in expected.results], abs=1e-4
    )
    assert all(r["document"] == {"text": DOCUMENTS[r["index"]]} for r in body["results"])
    assert body["usage"] == {
        "prompt_tokens": expected.usage.prompt_tokens,
        "total_tokens": expected.usage.total_tokens,
    }


def test_top_n_returns_the_best_documents(cluster: Cluster, alone: LlamaCppEngine) -> None:
    response = _rerank(cluster, query=QUERY, documents=DOCUMENTS, top_n=2, return_documents=False)
    assert response.status_code == 200, response.text
    best = alone.rerank(pb.RerankRequest(query=QUERY, documents=DOCUMENTS)).results[:2]
    assert [r["index"] for r in response.json()["results"]] == [r.index for r in best]
    assert all("document" not in r for r in response.json()["results"])


def test_a_document_too_long_for_the_model_is_refused_by_name(cluster: Cluster) -> None:
    response = _rerank(cluster, query=QUERY, documents=["a dog", "fox " * 600, "a cat"])
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("context_length_exceeded", "documents")
    assert "documents[1] makes a pair of 609 tokens with the query" in error["message"]
    assert "at most 512 tokens per pair" in error["message"]


def test_a_llama_model_without_reranking_true_is_refused_by_name(cluster: Cluster) -> None:
    response = httpx.post(
        f"{cluster.frontend_url}/v1/rerank",
        json={"model": TEXT, "query": QUERY, "documents": DOCUMENTS},
        timeout=60,
    )
    assert response.status_code == 400
    assert (
        f"model {TEXT!r} is not a reranking model (set `reranking: true`"
        in response.json()["error"]["message"]
    )
