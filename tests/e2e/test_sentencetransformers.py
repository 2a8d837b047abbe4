"""A second real engine end to end: a frontend and a worker serve all-MiniLM-L6-v2 through the
`sentencetransformers` gallery backend (its own venv, started as `run.sh --addr` from the worker's
backends path) on `/v1/embeddings` and `/v1/rerank`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from corral.frontend.bounds import RERANK_DOCUMENTS_MAX, RERANK_TEXT_MAX
from corral.models.defaults import MINILM_ST_NAME
from support import st_backend
from support.cluster import Cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # the session builds the backend's venv first

MODEL = MINILM_ST_NAME
QUERY = "A man is eating food."
DOCUMENTS = [
    "The weather is sunny today.",
    "A man is eating a piece of bread.",
    "Stock markets fell sharply.",
    "Someone eats a meal.",
]


@pytest.fixture(scope="module")
def cluster(
    state_root: Path, make_database: Callable[[], str], nats_url: str, st_backends_path: Path
) -> Iterator[Cluster]:
    c = Cluster(root=state_root / "e2e-sentencetransformers", database_url=make_database(), nats_url=nats_url)
    st_backend.prepare_model(c.models_dir)
    (c.models_dir / "sim.yaml").write_text("name: sim\nbackend: simulator\nparameters:\n  model: sim\n")
    try:
        c.start_frontend()
        c.start_worker("w1", "--backends-path", str(st_backends_path))
        yield c
    finally:
        c.stop()


def _post(cluster: Cluster, path: str, body: Any) -> httpx.Response:
    return httpx.post(f"{cluster.frontend_url}{path}", json=body, timeout=300)


def test_embeddings_are_sentence_transformers_vectors(cluster: Cluster) -> None:
    reference = st_backend.reference_vectors()
    sentences = list(reference)
    response = _post(cluster, "/v1/embeddings", {"model": MODEL, "input": sentences})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == MODEL and body["usage"]["prompt_tokens"] > len(sentences)
    for item, sentence in zip(body["data"], sentences, strict=True):
        assert len(item["embedding"]) == 384
        assert st_backend.cosine(item["embedding"], reference[sentence]) > 0.999


def test_rerank_answers_in_the_jina_shape_best_first(cluster: Cluster) -> None:
    response = _post(cluster, "/v1/rerank", {"model": MODEL, "query": QUERY, "documents": DOCUMENTS})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == MODEL
    assert 0 < body["usage"]["prompt_tokens"] < body["usage"]["total_tokens"]
    results = body["results"]
    assert sorted(r["index"] for r in results) == [0, 1, 2, 3]
    assert {r["index"] for r in results[:2]} == {1, 3}
    assert all(r["document"] == {"text": DOCUMENTS[r["index"]]} for r in results)
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True) and -1 <= scores[-1] and scores[0] <= 1

    top = _post(
        cluster,
        "/v1/rerank",
        {"model": MODEL, "query": QUERY, "documents": DOCUMENTS, "top_n": 2, "return_documents": False},
    ).json()
    assert [r["index"] for r in top["results"]] == [r["index"] for r in results[:2]]
    assert all("document" not in r for r in top["results"])
    more = _post(cluster, "/v1/rerank", {"model": MODEL, "query": QUERY, "documents": DOCUMENTS, "top_n": 99})
    assert more.status_code == 200 and len(more.json()["results"]) == len(DOCUMENTS)


@pytest.mark.parametrize(
    "body, field",
    [
        ({"query": QUERY, "documents": []}, "documents"),
        ({"query": QUERY, "documents": "one string"}, "documents"),
        ({"query": QUERY, "documents": ["d"] * (RERANK_DOCUMENTS_MAX + 1)}, "documents"),
        ({"query": QUERY, "documents": ["d", "x" * (RERANK_TEXT_MAX + 1)]}, "documents"),
        ({"query": QUERY, "documents": ["d", 7]}, "documents"),
        ({"query": "", "documents": DOCUMENTS}, "query"),
        ({"query": "q" * (RERANK_TEXT_MAX + 1), "documents": DOCUMENTS}, "query"),
        ({"documents": DOCUMENTS}, "query"),
        ({"query": QUERY, "documents": DOCUMENTS, "top_n": -1}, "top_n"),
        ({"query": QUERY, "documents": DOCUMENTS, "top_n": RERANK_DOCUMENTS_MAX + 1}, "top_n"),
        ({"query": QUERY, "documents": DOCUMENTS, "top_n": 2**64}, "top_n"),
        ({"query": QUERY, "documents": DOCUMENTS, "top_n": "two"}, "top_n"),
    ],
)
def test_bad_rerank_input_is_a_400_naming_the_field(
    cluster: Cluster, body: dict[str, Any], field: str
) -> None:
    response = _post(cluster, "/v1/rerank", {"model": MODEL, **body})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == field or f"'{field}" in error["message"], error


def test_a_model_that_does_not_rerank_is_named(cluster: Cluster) -> None:
    response = _post(cluster, "/v1/rerank", {"model": "sim", "query": QUERY, "documents": DOCUMENTS})
    assert response.status_code == 400
    assert "reranking: true" in response.json()["error"]["message"]
    missing = _post(cluster, "/v1/rerank", {"model": "nope/../x", "query": QUERY, "documents": DOCUMENTS})
    assert missing.status_code == 404 and MODEL in missing.json()["error"]["message"]
