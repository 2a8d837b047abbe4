"""The llama-cpp token loop: sample, detokenize incrementally, honour stop strings and limits.

`PredictOptions` -> sampling (proto3 cannot tell "unset" from 0, so 0 means llama.cpp's default):
`Tokens` (0 = 256), `Temperature` (0 = greedy), `TopK` (0 = 40; negative disables), `TopP`
(0 = 0.95), `MinP` (0 = 0.05), `Penalty` = repeat penalty (0 = 1.0, off), `FrequencyPenalty`,
`PresencePenalty`, `IgnoreEOS`, `Grammar` (GBNF), `StopPrompts`, `LogitBias` (JSON token id -> bias);
`Logprobs` > 0 records each token's logprob and `TopLogprobs` alternatives (llama_logprobs.py).
"""

from __future__ import annotations

import codecs
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import llama_cpp
from llama_cpp import Llama
from llama_cpp.llama_grammar import LlamaGrammar

from corral.backends.engine import check_prompt_fits, requested_max_tokens
from corral.backends.llama_grammar import GrammarCache
from corral.backends.llama_logprobs import LogprobRecorder, logit_bias_processor, parse_logit_bias
from corral.backends.llama_prompt_cache import PromptCache
from corral.backends.stop_scanner import StopScanner
from corral.proto import backend_pb2 as pb

DEFAULT_TOP_K = 40
DEFAULT_TOP_P = 0.95
DEFAULT_MIN_P = 0.05
GRAMMARS = GrammarCache()  # one model per backend process: one cache


@dataclass(frozen=True)
class Sampling:
    max_tokens: int
    temperature: float = 0.0
    top_k: int = DEFAULT_TOP_K
    top_p: float = DEFAULT_TOP_P
    min_p: float = DEFAULT_MIN_P
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    ignore_eos: bool = False
    grammar: str = ""
    logit_bias: tuple[tuple[int, float], ...] = ()


def sampling_from_request(req: pb.PredictOptions, default_max_tokens: int, n_vocab: int) -> Sampling:
    return Sampling(
        max_tokens=requested_max_tokens(req, default_max_tokens),
        temperature=req.Temperature,
        top_k=req.TopK or DEFAULT_TOP_K,
        top_p=req.TopP or DEFAULT_TOP_P,
        min_p=req.MinP or DEFAULT_MIN_P,
        repeat_penalty=req.Penalty or 1.0,
        frequency_penalty=req.FrequencyPenalty,
        presence_penalty=req.PresencePenalty,
        ignore_eos=req.IgnoreEOS,
        grammar=req.Grammar,
        logit_bias=tuple(parse_logit_bias(req.LogitBias, n_vocab).items()) if req.LogitBias else (),
    )


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_time_s: float = 0.0
    generation_time_s: float = 0.0
    finish_reason: str = ""


@dataclass
class GenerationRequest:
    prompt_tokens: list[int]
    sampling: Sampling
    stops: tuple[str, ...] = ()
    seed: int = 0
    # evaluates the prompt, reusing cached cells as the model's cache_prompt says (llama_prompt_cache.py); None:
    # the caller evaluated it into the context already (a prompt with images)
    prompt_cache: PromptCache | None = None
    logprobs: LogprobRecorder | None = None  # records each generated token's logprob when asked
    stats: GenerationStats = field(default_factory=GenerationStats)


def token_budget(llm: Llama, request: GenerationRequest) -> int:
    """Max new tokens that fit: the requested count, cut to the context left after the prompt."""
    n_ctx, n_prompt = llm.n_ctx(), len(request.prompt_tokens)
    check_prompt_fits(n_prompt, n_ctx)
    return min(request.sampling.max_tokens, n_ctx - n_prompt)


def generate_pieces(llm: Llama, request: GenerationRequest) -> Iterator[str]:
    """Yield decoded text pieces; fill `request.stats` as it goes. Validates before the first yield."""
    budget = token_budget(llm, request)
    grammar = GRAMMARS.get(llm, request.sampling.grammar)
    return _token_loop(llm, request, budget, grammar)


def _token_loop(
    llm: Llama, request: GenerationRequest, budget: int, grammar: LlamaGrammar | None
) -> Iterator[str]:
    sampling, stats = request.sampling, request.stats
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    scanner = StopScanner(request.stops)
    stats.prompt_tokens, stats.finish_reason = len(request.prompt_tokens), "length"
    llm.set_seed(request.seed & 0xFFFFFFFF)
    started = first_token_at = time.perf_counter()
    if request.prompt_cache is not None:
        request.prompt_cache.evaluate(request.prompt_tokens)
    tokens = llm.generate(
        request.prompt_tokens,
        top_k=sampling.top_k,
        top_p=sampling.top_p,
        min_p=sampling.min_p,
        temp=sampling.temperature,
        repeat_penalty=sampling.repeat_penalty,
        frequency_penalty=sampling.frequency_penalty,
        presence_penalty=sampling.presence_penalty,
        grammar=grammar,
        logits_processor=logit_bias_processor(dict(sampling.logit_bias)),
        reset=True,  # finds the whole prompt in the context: samples at once
    )
    recorder = request.logprobs
    try:
        for token in tokens:
            if stats.completion_tokens == 0:
                first_token_at = time.perf_counter()
                stats.prompt_time_s = first_token_at - started
            if not sampling.ignore_eos and llama_cpp.llama_vocab_is_eog(vocab, token):
                stats.finish_reason = "stop"
                break
            stats.completion_tokens += 1
            if recorder is not None:
                recorder.record(token)
            text = scanner.feed(decoder.decode(llm.detokenize([token])))
            if recorder is not None and scanner.stopped:
                recorder.drop_last()
            if text:
                yield text
            if scanner.stopped:
                stats.finish_reason = "stop"
                break
            if stats.completion_tokens >= budget:
                break
    finally:
        tokens.close()
        stats.generation_time_s = time.perf_counter() - first_token_at
    tail = scanner.feed(decoder.decode(b"", final=True)) + scanner.flush()
    if tail:
        yield tail
