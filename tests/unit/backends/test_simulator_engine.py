"""The simulator engine, called directly (no gRPC)."""

from __future__ import annotations

import math
import time

import pytest

from corral.backends.engine import InvalidRequestError, LoadError
from corral.backends.simulator import SimulatorEngine
from corral.proto import backend_pb2 as pb


def loaded(model: str = "sim-model", options: tuple[str, ...] = ()) -> SimulatorEngine:
    engine = SimulatorEngine()
    engine.load(pb.ModelOptions(Model=model, Options=list(options)))
    return engine


def test_the_same_prompt_gives_the_same_text() -> None:
    req = pb.PredictOptions(Prompt="tell me about rivers", Tokens=8)
    assert loaded().predict(req).message == loaded().predict(req).message


def test_a_different_prompt_or_model_identity_gives_different_text() -> None:
    base = loaded("a").predict(pb.PredictOptions(Prompt="one two", Tokens=8)).message
    assert loaded("a").predict(pb.PredictOptions(Prompt="one three", Tokens=8)).message != base
    assert loaded("b").predict(pb.PredictOptions(Prompt="one two", Tokens=8)).message != base


def test_prompt_tokens_are_the_whitespace_separated_words_of_the_prompt() -> None:
    reply = loaded().predict(pb.PredictOptions(Prompt="  one two\nthree\tfour ", Tokens=1))
    assert reply.prompt_tokens == 4


def test_prompt_tokens_of_a_chat_are_the_words_of_all_message_contents() -> None:
    req = pb.PredictOptions(
        UseTokenizerTemplate=True,
        Messages=[
            pb.Message(role="system", content="be brief"),
            pb.Message(role="user", content="hi there you"),
        ],
    )
    assert loaded().predict(req).prompt_tokens == 5


def test_exactly_the_requested_number_of_words_is_generated() -> None:
    reply = loaded().predict(pb.PredictOptions(Prompt="hi", Tokens=7))
    assert reply.tokens == 7
    assert len(reply.message.decode().split()) == 7


def test_sixteen_words_are_generated_when_tokens_is_zero() -> None:
    reply = loaded().predict(pb.PredictOptions(Prompt="hi"))
    assert reply.tokens == 16
    assert len(reply.message.decode().split()) == 16


def test_negative_max_tokens_are_refused() -> None:
    with pytest.raises(InvalidRequestError, match="Tokens"):
        loaded().predict(pb.PredictOptions(Prompt="hi", Tokens=-1))


def test_a_request_without_prompt_or_messages_is_refused() -> None:
    with pytest.raises(InvalidRequestError, match="Prompt"):
        loaded().predict(pb.PredictOptions())


def test_streaming_sends_one_word_per_reply_then_a_final_reply_with_the_counts() -> None:
    replies = list(loaded().predict_stream(pb.PredictOptions(Prompt="a b c", Tokens=5)))
    pieces, final = replies[:-1], replies[-1]
    assert len(pieces) == 5
    assert all(len(r.message.decode().split()) == 1 for r in pieces)
    assert all(r.chat_deltas[0].content == r.message.decode() for r in pieces)
    assert final.message == b"" and not final.chat_deltas
    assert (final.tokens, final.prompt_tokens) == (5, 3)


def test_streamed_pieces_concatenate_to_the_non_streamed_text() -> None:
    engine = loaded()
    req = pb.PredictOptions(Prompt="same words", Tokens=6)
    streamed = b"".join(r.message for r in engine.predict_stream(req))
    assert streamed == engine.predict(req).message


def test_output_token_time_paces_the_generation() -> None:
    engine = loaded(options=("output_token_time_s:0.02",))
    started = time.perf_counter()
    reply = engine.predict(pb.PredictOptions(Prompt="x", Tokens=5))
    assert time.perf_counter() - started >= 0.1
    assert reply.timing_token_generation >= 0.1


def test_prompt_token_time_delays_the_first_token() -> None:
    engine = loaded(options=("prompt_token_time_s:0.02",))
    reply = engine.predict(pb.PredictOptions(Prompt="a b c d e", Tokens=1))
    assert reply.timing_prompt_processing >= 0.1


def test_load_time_makes_load_model_take_that_long() -> None:
    engine = SimulatorEngine()
    started = time.perf_counter()
    engine.load(pb.ModelOptions(Model="m", Options=["load_time_s:0.2"]))
    assert time.perf_counter() - started >= 0.2


def test_load_fail_makes_load_model_fail_with_that_message() -> None:
    with pytest.raises(LoadError, match="^CUDA out of memory: tried 9 GiB$"):
        SimulatorEngine().load(
            pb.ModelOptions(Model="m", Options=["load_fail:CUDA out of memory: tried 9 GiB"])
        )


def test_a_bad_option_value_fails_the_load_naming_the_option() -> None:
    with pytest.raises(LoadError, match="output_token_time_s"):
        SimulatorEngine().load(pb.ModelOptions(Model="m", Options=["output_token_time_s:fast"]))


def test_a_missing_model_file_still_loads_because_it_is_simulated() -> None:
    engine = SimulatorEngine()
    engine.load(pb.ModelOptions(Model="m", ModelFile="/nonexistent/model.gguf"))
    assert engine.predict(pb.PredictOptions(Prompt="hi", Tokens=1)).tokens == 1


def test_embeddings_are_deterministic_unit_vectors_of_the_default_dimension() -> None:
    engine = loaded()
    first = engine.embed(pb.PredictOptions(Embeddings="hello world"))
    again = engine.embed(pb.PredictOptions(Embeddings="hello world"))
    other = engine.embed(pb.PredictOptions(Embeddings="goodbye world"))
    assert first.dim == len(first.embeddings) == 384
    assert math.isclose(sum(v * v for v in first.embeddings), 1.0, rel_tol=1e-5)
    assert list(first.embeddings) == list(again.embeddings)
    assert list(first.embeddings) != list(other.embeddings)
    assert (first.tokens, first.prompt_tokens, first.layout) == (2, 2, pb.EMBEDDING_LAYOUT_FINAL)


def test_embedding_dim_sets_the_vector_length() -> None:
    assert loaded(options=("embedding_dim:8",)).embed(pb.PredictOptions(Embeddings="x")).dim == 8


def test_embedding_without_text_is_refused() -> None:
    with pytest.raises(InvalidRequestError, match="Embeddings"):
        loaded().embed(pb.PredictOptions())


def test_tokenize_gives_one_stable_id_per_word() -> None:
    engine = loaded()
    result = engine.tokenize(pb.PredictOptions(Prompt="red green red"))
    assert result.length == 3
    assert result.tokens[0] == result.tokens[2] != result.tokens[1]
