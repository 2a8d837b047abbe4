"""Reranking on the llama.cpp engine (llama_rerank.py), in this process, on the generated tiny cross-encoder
(`tiny_reranker`: BERT with a seeded random classifier head; no cross-encoder weights are packaged). Its scores
carry no meaning, so the tests check what the engine does with them: pairs laid out as llama.cpp's server lays
them out, every pair of a batch scored as if alone, best first, top_n, usage, and refusals by name."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from corral.backends.engine import ContextLengthError, InvalidRequestError, LoadError, NotSupportedError
from corral.models.tiny_gguf import write_tiny_llama
from corral.models.tiny_reranker import write_tiny_reranker
from corral.proto import backend_pb2 as pb
from support.backend_processes import load, rpc_error, running_backend

pytest.importorskip("llama_cpp")  # at import, not in a test: llama_cpp opens /dev/null when imported
from corral.backends.llama_cpp import LlamaCppEngine

QUERY = "what animal jumps over the dog"
DOCUMENTS = [
    "the quick brown fox jumps over the lazy dog",
    "corral serves language models over grpc",
    "paris is the capital of france",
    "a cold rain in berlin",
    "the cat is a pet",
]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rerank")
    write_tiny_reranker(root / "rr.gguf")
    # the same weights with a rerank template that spells out the built-in BERT layout
    write_tiny_reranker(root / "rr-template.gguf", rerank_template="[CLS]{query}[SEP]{document}[SEP]")
    write_tiny_llama(root / "llama.gguf")
    return root


def _engine(path: Path, **fields: object) -> LlamaCppEngine:
    engine = LlamaCppEngine()
    options = {"Model": "rr", "ModelFile": str(path), "ContextSize": 512, "Threads": 2, **fields}
    engine.load(pb.ModelOptions(**options))  # type: ignore[arg-type]
    return engine


@pytest.fixture(scope="module")
def engine(files: Path) -> Iterator[LlamaCppEngine]:
    engine = _engine(files / "rr.gguf", Reranking=True)
    yield engine
    engine.free()


def _rerank(
    engine: LlamaCppEngine, documents: list[str], top_n: int = 0, query: str = QUERY
) -> pb.RerankResult:
    return engine.rerank(pb.RerankRequest(query=query, documents=documents, top_n=top_n))


def _alone(engine: LlamaCppEngine, document: str) -> float:
    score: float = _rerank(engine, [document]).results[0].relevance_score
    return score


def test_documents_come_best_first_each_scored_as_if_alone(engine: LlamaCppEngine) -> None:
    result = _rerank(engine, DOCUMENTS)
    scores = [item.relevance_score for item in result.results]
    assert sorted(item.index for item in result.results) == list(range(len(DOCUMENTS)))
    assert scores == sorted(scores, reverse=True) and len(set(scores)) == len(scores)
    assert [item.text for item in result.results] == [DOCUMENTS[item.index] for item in result.results]
    for item in result.results:  # one batch of five sequences gives each pair its own score
        assert item.relevance_score == pytest.approx(_alone(engine, DOCUMENTS[item.index]), abs=1e-4)
    assert _rerank(engine, DOCUMENTS) == result  # deterministic


def test_top_n_keeps_the_best_and_usage_counts_every_pair_token(engine: LlamaCppEngine) -> None:
    full = _rerank(engine, DOCUMENTS)
    top = _rerank(engine, DOCUMENTS, top_n=2)
    assert list(top.results) == list(full.results)[:2]
    llm = engine._llm
    assert llm is not None
    words = sum(
        len(llm.tokenize(text.encode(), add_bos=False, special=False)) for text in [QUERY, *DOCUMENTS]
    )
    n_query = len(llm.tokenize(QUERY.encode(), add_bos=False, special=False))
    pair_tokens = words + (len(DOCUMENTS) - 1) * n_query + 3 * len(DOCUMENTS)  # [CLS] q [SEP] d [SEP] each
    assert top.usage.prompt_tokens == top.usage.total_tokens == pair_tokens


def test_a_rerank_template_is_used_and_gives_the_layout_it_spells(
    files: Path, engine: LlamaCppEngine
) -> None:
    templated = _engine(files / "rr-template.gguf", Reranking=True)
    try:
        assert templated._pair_format is not None and templated._pair_format.template is not None
        with_template = _rerank(templated, DOCUMENTS)
    finally:
        templated.free()
    built_in = _rerank(engine, DOCUMENTS)
    assert [i.index for i in with_template.results] == [i.index for i in built_in.results]
    assert [i.relevance_score for i in with_template.results] == pytest.approx(
        [i.relevance_score for i in built_in.results], abs=1e-5
    )
    assert with_template.usage == built_in.usage


def test_a_pair_too_long_for_the_model_is_refused_by_name(engine: LlamaCppEngine) -> None:
    long_text = "fox " * 600
    with pytest.raises(ContextLengthError, match=r"documents\[1\] makes a pair of 609 tokens .* at most 512"):
        _rerank(engine, ["a dog", long_text])
    with pytest.raises(ContextLengthError, match="the query is 603 tokens .* shorten the query"):
        _rerank(engine, ["a dog"], query=long_text)


def test_a_batch_size_above_llamas_default_micro_batch_scores_a_pair_that_long(files: Path) -> None:
    wide = _engine(files / "rr.gguf", Reranking=True, ContextSize=1024, NBatch=1024)
    try:
        result = _rerank(
            wide, ["a dog", "fox " * 700]
        )  # a pair of 709 tokens: one micro-batch of more than 512
    finally:
        wide.free()
    assert sorted(item.index for item in result.results) == [0, 1] and result.usage.total_tokens == 709 + 11


@pytest.mark.parametrize(
    ("request_fields", "words"),
    [
        ({"query": "", "documents": ["a"]}, "Rerank needs a non-empty query"),
        ({"query": "q", "documents": []}, "Rerank needs at least one document"),
        ({"query": "q", "documents": ["a"], "top_n": -1}, "Rerank top_n must be >= 0"),
    ],
)
def test_a_malformed_request_is_refused(
    engine: LlamaCppEngine, request_fields: dict[str, object], words: str
) -> None:
    with pytest.raises(InvalidRequestError, match=words):
        engine.rerank(pb.RerankRequest(**request_fields))  # type: ignore[arg-type]


def test_rerank_needs_the_model_loaded_for_reranking_and_a_reranker_only_reranks(
    files: Path, engine: LlamaCppEngine
) -> None:
    plain = _engine(files / "llama.gguf", Embeddings=True)
    try:
        with pytest.raises(NotSupportedError, match="loaded without reranking; set reranking: true"):
            _rerank(plain, ["a"])
    finally:
        plain.free()
    with pytest.raises(NotSupportedError, match="loaded for reranking: its output is a relevance score"):
        engine.embed(pb.PredictOptions(Embeddings="a dog"))
    with pytest.raises(NotSupportedError, match="loaded for reranking: it scores .* generates no text"):
        engine.predict(pb.PredictOptions(Prompt="a dog", Tokens=2))


def test_reranking_a_model_without_a_classifier_head_fails_the_load(files: Path) -> None:
    with pytest.raises(LoadError, match="llama.gguf is not a reranker: its GGUF pooling_type is mean"):
        _engine(files / "llama.gguf", Reranking=True)


def test_the_rerank_rpc_serves_the_engines_order_and_an_engine_without_it_names_it(
    files: Path, engine: LlamaCppEngine
) -> None:
    request = pb.RerankRequest(query=QUERY, documents=DOCUMENTS, top_n=3)
    with running_backend("llama-cpp", files) as backend:
        assert load(backend, "rr", ModelFile=str(files / "rr.gguf"), ContextSize=512, Reranking=True).success
        served = backend.stub.Rerank(request, timeout=30)
    alone = engine.rerank(request)
    assert [i.index for i in served.results] == [i.index for i in alone.results] and len(alone.results) == 3
    assert [i.relevance_score for i in served.results] == pytest.approx(
        [i.relevance_score for i in alone.results], abs=1e-4
    )
    assert served.usage == alone.usage
    with running_backend("simulator", files) as backend:
        assert load(backend, "sim").success
        error = rpc_error(backend.stub.Rerank, request)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "simulator backend does not implement Rerank" in error.details()
