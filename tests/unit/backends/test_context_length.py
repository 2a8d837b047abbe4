"""A prompt that does not fit the context is refused with its own status (OUT_OF_RANGE), which the frontend
answers as OpenAI's `context_length_exceeded`."""

from __future__ import annotations

import grpc
import pytest

from corral.backends.engine import ContextLengthError, check_prompt_fits
from corral.backends.simulator import SimulatorEngine
from corral.proto import backend_pb2 as pb


def _simulator(context_tokens: int) -> SimulatorEngine:
    engine = SimulatorEngine()
    engine.load(pb.ModelOptions(Model="sim", ContextSize=context_tokens))
    return engine


def test_a_prompt_must_leave_room_for_one_generated_token() -> None:
    check_prompt_fits(7, 8)
    with pytest.raises(ContextLengthError) as caught:
        check_prompt_fits(8, 8)
    assert caught.value.status is grpc.StatusCode.OUT_OF_RANGE
    assert str(caught.value) == (
        "the prompt is 8 tokens but the context window is 8; shorten the prompt or load "
        "the model with a larger context_size"
    )
    check_prompt_fits(8, 8, generating=False)  # an embedding input may fill the context


def test_the_simulator_refuses_a_prompt_of_its_context_size_in_words() -> None:
    engine = _simulator(4)
    assert engine.predict(pb.PredictOptions(Prompt="one two three", Tokens=2)).tokens == 2
    with pytest.raises(ContextLengthError):
        engine.predict_stream(pb.PredictOptions(Prompt="one two three four"))  # before the first reply
    with pytest.raises(ContextLengthError):
        engine.predict_stream(
            pb.PredictOptions(
                Messages=[pb.Message(role="user", content="a b"), pb.Message(role="user", content="c d")]
            )
        )
    with pytest.raises(ContextLengthError):
        engine.embed(pb.PredictOptions(Embeddings="one two three four five"))
    assert engine.embed(pb.PredictOptions(Embeddings="one two three four")).tokens == 4


def test_the_simulator_without_a_context_size_takes_any_prompt() -> None:
    assert _simulator(0).predict(pb.PredictOptions(Prompt="word " * 10_000, Tokens=1)).prompt_tokens == 10_000
