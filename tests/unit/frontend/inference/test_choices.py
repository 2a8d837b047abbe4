"""Choices of one request (`n`, batched prompts) and logprobs in OpenAI's shapes: pure logic."""

from __future__ import annotations

from corral.frontend.inference import choices, logprobs
from corral.proto import backend_pb2


def test_n_choices_of_a_prompt_are_indexed_in_openais_order_with_seeds_that_differ_and_repeat() -> None:
    opts = backend_pb2.PredictOptions(Prompt="p", Seed=2**31 - 2, CorrelationId="c0")
    made = choices.replicate(opts, 3, prompt=2)
    assert [(c.index, c.prompt) for c in made] == [(6, 2), (7, 2), (8, 2)]  # prompt 2 of n = 3
    assert [c.opts.Seed for c in made] == [2**31 - 2, 2**31 - 1, -(2**31)]  # seed + i, wrapped into int32
    assert len({c.opts.CorrelationId for c in made}) == 3 and all(c.opts.Prompt == "p" for c in made)
    unseeded = choices.replicate(backend_pb2.PredictOptions(Prompt="p"), 2, prompt=0)
    assert [c.opts.Seed for c in unseeded] == [0, 0]  # no seed: each generation picks its own


def test_completion_logprobs_run_their_text_offsets_on_across_pieces_from_the_echoed_prompt() -> None:
    shaper = logprobs.CompletionLogprobs(offset=len("Hi"))  # the echoed prompt comes first
    entry = {
        "token": " there",
        "logprob": -0.5,
        "bytes": [],
        "top_logprobs": [{"token": " there", "logprob": -0.5}, {"token": "!", "logprob": -1.5}],
    }
    first = shaper.shape([entry, {**entry, "token": "!", "top_logprobs": []}])
    second = shaper.shape([{**entry, "token": " ok"}])
    assert first == {
        "tokens": [" there", "!"],
        "token_logprobs": [-0.5, -0.5],
        "top_logprobs": [{" there": -0.5, "!": -1.5}, {}],
        "text_offset": [2, 8],
    }
    assert second["text_offset"] == [9]


def test_usage_counts_each_prompt_once_and_every_completion() -> None:
    made = choices.replicate(backend_pb2.PredictOptions(), 2, prompt=0) + choices.replicate(
        backend_pb2.PredictOptions(), 2, prompt=1
    )
    replies = [backend_pb2.Reply(prompt_tokens=p, tokens=t) for p, t in ((5, 3), (5, 4), (7, 1), (7, 2))]
    assert choices.usage_of(made, replies) == {
        "prompt_tokens": 12,
        "completion_tokens": 10,
        "total_tokens": 22,
    }
