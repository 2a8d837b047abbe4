"""The `Engine` protocol a backend process serves, and the errors engines raise.

An engine owns at most one loaded model. Its methods are blocking and are called from worker threads:
one call at a time unless the engine has a `parallel` above 1 (then up to that many at once, admitted by the
server, and the engine keeps its own state consistent: llama_parallel.py); load and free always run alone.
The server owns lifecycle state, the ModelIdentity rule and gRPC status codes; engines only raise
the exceptions below, whose messages go to the client verbatim.

Conventions every engine follows:

* `load` raises `LoadError` (or any exception) on failure; its message is returned as
  `Result(success=False, message=...)`, so it must name the real cause.
* `predict` returns one `Reply`: `message` = generated UTF-8 text, `tokens` = completion tokens,
  `prompt_tokens`, and timings in seconds. Finish reason is not on the wire: the frontend infers
  `length` when `tokens == requested max tokens`, otherwise `stop`.
* `predict_stream` yields one `Reply` per text piece (`message` = piece, `chat_deltas` =
  `[ChatDelta(content=piece)]`, counts 0), then exactly one final `Reply` with empty `message`,
  no `chat_deltas`, and the `tokens` / `prompt_tokens` / timing totals.
* The server answers Predict from `predict_stream` too (so a cancelled call stops at the next
  piece); `predict` must therefore return exactly what folding the stream gives, and exists
  for in-process callers (tests, benchmarks).
* `embed` returns `EmbeddingResult(layout=FINAL)` for a pooled vector.
* Optional, served by the servicer when present (else the RPC is refused by name): `rerank` returns
  `RerankResult` with the documents best first, cut to `top_n` (0 = all), and `transcribe`, `tts`,
  `generate_image` for the other modality RPCs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import grpc

from corral.proto import backend_pb2 as pb

DEFAULT_MAX_TOKENS_LLAMA = 256
DEFAULT_MAX_TOKENS_SIMULATOR = 16


class LoadError(Exception):
    """LoadModel failed; the message is the real cause and is returned to the caller."""


class EngineError(Exception):
    """A request the engine refuses; `status` is the gRPC code the server answers with."""

    status: grpc.StatusCode = grpc.StatusCode.INTERNAL


class InvalidRequestError(EngineError):
    """The request itself is wrong (missing prompt, bad parameter, too long for the context)."""

    status = grpc.StatusCode.INVALID_ARGUMENT


class ContextLengthError(InvalidRequestError):
    """The prompt does not fit the model's context window: shorten it, or load the model with a larger
    context_size. Its own status, so the frontend answers OpenAI's `context_length_exceeded`."""

    status = grpc.StatusCode.OUT_OF_RANGE


def check_prompt_fits(n_prompt: int, n_ctx: int, *, generating: bool = True) -> None:
    """Refuse a prompt of `n_prompt` tokens that leaves no room in a context of `n_ctx` tokens (no room for
    one generated token when `generating`)."""
    if n_prompt > n_ctx - (1 if generating else 0):
        raise ContextLengthError(
            f"the prompt is {n_prompt} tokens but the context window is {n_ctx}; shorten the prompt "
            "or load the model with a larger context_size"
        )


class NotSupportedError(EngineError):
    """The loaded model cannot serve this kind of request (e.g. embeddings not enabled at load)."""

    status = grpc.StatusCode.FAILED_PRECONDITION


class Engine(Protocol):
    """One model runtime. See the module docstring for the reply conventions."""

    name: str

    def load(self, opts: pb.ModelOptions) -> None: ...

    def predict(self, req: pb.PredictOptions) -> pb.Reply: ...

    def predict_stream(self, req: pb.PredictOptions) -> Iterator[pb.Reply]: ...

    def embed(self, req: pb.PredictOptions) -> pb.EmbeddingResult: ...

    def tokenize(self, req: pb.PredictOptions) -> pb.TokenizationResponse: ...

    def free(self) -> None: ...


def requested_max_tokens(req: pb.PredictOptions, default: int) -> int:
    """`PredictOptions.Tokens`, with 0 meaning `default`; negative values are refused."""
    if req.Tokens < 0:
        raise InvalidRequestError(f"Tokens must be >= 0 (0 means the default of {default}), got {req.Tokens}")
    return req.Tokens or default


def piece_reply(piece: str) -> pb.Reply:
    """A streaming Reply carrying one text piece."""
    return pb.Reply(message=piece.encode("utf-8"), chat_deltas=[pb.ChatDelta(content=piece)])


def final_reply(
    *, tokens: int, prompt_tokens: int, prompt_time_s: float, generation_time_s: float, text: str = ""
) -> pb.Reply:
    """The Reply closing a stream (empty text) or answering Predict (full text)."""
    return pb.Reply(
        message=text.encode("utf-8"),
        tokens=tokens,
        prompt_tokens=prompt_tokens,
        timing_prompt_processing=prompt_time_s,
        timing_token_generation=generation_time_s,
    )
