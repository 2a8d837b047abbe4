"""A chat request's backend call (`chat_options`) and the `chat.completion` object of its reply (`chat_completion`):
what the chat route, `/v1/responses`, the agent loop and the hot path (frontend/hot_path.py) build, in one place.
Compiled with the request path (corral/native.py): plain functions of the request and the reply, nothing awaited."""

from __future__ import annotations

import itertools
import os
from typing import Any

import orjson

from corral.frontend.inference.choices import finish_reason, usage
from corral.frontend.inference.schemas import ChatCompletionRequest, ChatMessage, _Sampling
from corral.frontend.inference.structured_output import offer_tools, request_grammar
from corral.frontend.inference.tool_calls import openai_tool_calls, reply_tool_calls
from corral.frontend.state import FrontendState
from corral.models.config import ModelConfig
from corral.proto import backend_pb2
from corral.routing.replica import Replica

DEFAULT_MAX_TOKENS = 256
_ID_PREFIX = os.urandom(8).hex()  # this process's: ids are unique across frontends, as uuid4's were
_ID_SEQUENCE = itertools.count(int.from_bytes(os.urandom(4), "big"))


def random_id() -> str:
    """32 hex digits unique to this request: a random per-process prefix and a counter (no syscall; os.urandom
    per id was a getrandom call twice per request)."""
    return f"{_ID_PREFIX}{next(_ID_SEQUENCE) & 0xFFFF_FFFF_FFFF_FFFF:016x}"


def node_header(state: FrontendState, replica: Replica) -> dict[str, str] | None:
    if not state.expose_node_header:
        return None
    return {
        "X-LocalAI-Node": replica.node_id,
        "X-Corral-Replica": f"{replica.model}#{replica.replica_index}@{replica.address}",
    }


def predict_options(cfg: ModelConfig, body: _Sampling, max_tokens: int | None) -> backend_pb2.PredictOptions:
    opts = backend_pb2.PredictOptions(
        Tokens=max_tokens or DEFAULT_MAX_TOKENS, ModelIdentity=cfg.model, CorrelationId=random_id()
    )
    if body.stop is not None:  # an empty list passed to the constructor alone costs a microsecond
        opts.StopPrompts.extend(body.stop_list())
    if body.temperature is not None:
        opts.Temperature = body.temperature
    if body.top_p is not None:
        opts.TopP = body.top_p
    if body.seed is not None:
        opts.Seed = body.seed
    if body.presence_penalty is not None:
        opts.PresencePenalty = body.presence_penalty
    if body.frequency_penalty is not None:
        opts.FrequencyPenalty = body.frequency_penalty
    if body.logit_bias:
        opts.LogitBias = orjson.dumps(body.logit_bias).decode()
    return opts


def add_chat_message(opts: backend_pb2.PredictOptions, m: ChatMessage) -> None:
    message = opts.Messages.add()  # filled in place: a third of building one and extending with it
    message.role, message.content = m.role, m.text()
    if m.name:
        message.name = m.name
    if m.tool_call_id:
        message.tool_call_id = m.tool_call_id
    if m.tool_calls:
        message.tool_calls = orjson.dumps([c.model_dump() for c in m.tool_calls]).decode()


def chat_options(cfg: ModelConfig, body: ChatCompletionRequest) -> tuple[backend_pb2.PredictOptions, int]:
    """A chat request's backend call and its token budget (also what `/v1/responses` sends)."""
    max_tokens = body.max_output_tokens() or DEFAULT_MAX_TOKENS
    opts = predict_options(cfg, body, max_tokens)
    opts.UseTokenizerTemplate = True
    for m in body.messages:
        add_chat_message(opts, m)
    grammar = request_grammar(body)
    if grammar:  # '' is proto3's default: not set, the same bytes
        opts.Grammar = grammar
    offer_tools(opts, body)
    if body.logprobs:
        opts.Logprobs, opts.TopLogprobs = 1, body.top_logprobs or 0
    return opts, max_tokens


def assistant_message(reply: backend_pb2.Reply, max_tokens: int) -> tuple[dict[str, Any], str]:
    """A chat reply's assistant message and finish reason."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.message.decode(errors="replace")}
    finish = finish_reason(reply.tokens, max_tokens)
    if reply.chat_deltas and (found := reply_tool_calls(reply)):
        message["tool_calls"] = openai_tool_calls(found)
        message["content"] = message["content"] or None  # as OpenAI answers a call
        finish = "tool_calls" if finish == "stop" else finish  # a call cut by max_tokens is "length"
    return message, finish


def chat_completion(
    model: str, ident: str, created: int, max_tokens: int, reply: backend_pb2.Reply
) -> dict[str, Any]:
    """The `chat.completion` object of one choice (also frontend/hot_path.py's)."""
    message, finish = assistant_message(reply, max_tokens)
    return {
        "id": ident,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": usage(reply.prompt_tokens, reply.tokens),
    }
