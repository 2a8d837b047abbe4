"""The backend's ranking becomes the Jina-shaped `results`: the document text is the request's own."""

from __future__ import annotations

from corral.frontend.inference.openai import _rerank_results
from corral.frontend.inference.schemas import RerankRequest
from corral.proto import backend_pb2 as pb


def _ranked(*pairs: tuple[int, float]) -> list[pb.DocumentResult]:
    return [pb.DocumentResult(index=i, text="what the backend says", relevance_score=s) for i, s in pairs]


def test_results_keep_the_backend_order_with_the_request_documents() -> None:
    body = RerankRequest.model_validate({"model": "m", "query": "q", "documents": ["a", "b", "c"]})
    results = _rerank_results(body, _ranked((2, 0.75), (0, 0.5)))
    assert results == [
        {"index": 2, "relevance_score": 0.75, "document": {"text": "c"}},
        {"index": 0, "relevance_score": 0.5, "document": {"text": "a"}},
    ]


def test_an_index_the_request_did_not_send_is_dropped_and_documents_can_be_left_out() -> None:
    body = RerankRequest.model_validate(
        {"model": "m", "query": "q", "documents": ["a"], "return_documents": False}
    )
    assert _rerank_results(body, _ranked((5, 0.9), (-1, 0.8), (0, 0.25))) == [
        {"index": 0, "relevance_score": 0.25}
    ]
