"""Answers of several generations, or with logprobs: `n` > 1, batched prompts (`/v1/completions`), logprobs.

A plain request (one prompt, n = 1, no logprobs) never comes here: `openai.py` answers it on its lean path.
Here each choice is its own backend call: the same PredictOptions, with the seed + i for choice i when a
seed is set (the choices differ, and a request repeated gets them again). Unary calls run concurrently, at
most CORRAL_MAX_N at once; streams run one after the other, each chunk naming its choice's `index`.
Usage sums the completion tokens of every choice and counts each prompt's tokens once (as OpenAI does for
`n`). Choice `i` of prompt `p` has index `p * n + i`, OpenAI's order.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi.responses import Response

from corral.frontend.errors import APIError
from corral.frontend.inference import logprobs
from corral.frontend.inference.call_errors import http_errors
from corral.frontend.inference.sse import DONE, sse
from corral.frontend.inference.tool_calls import delta_tool_calls
from corral.models.config import ModelConfig
from corral.proto import backend_pb2
from corral.routing import calls
from corral.routing.errors import BackendCallError, BackendTimeout
from corral.routing.queue import Queued
from corral.routing.replica import Replica
from corral.routing.router import Router

MAX_N_KNOB = "CORRAL_MAX_N"
_INT32 = 1 << 32

MessageOf = Callable[[backend_pb2.Reply, int], tuple[dict[str, Any], str]]  # chat reply -> (message, finish)
HeadersOf = Callable[[Replica], "dict[str, str] | None"]


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def finish_reason(completion_tokens: int, max_tokens: int) -> str:
    return "length" if completion_tokens >= max_tokens else "stop"


def check_n(n: int, max_n: int) -> None:
    if n > max_n:
        raise APIError(
            400,
            f"n is {n} but this server generates at most {max_n} choices per request (raise "
            f"{MAX_N_KNOB}); send a smaller n",
            "invalid_request_error",
            "invalid_value",
            "n",
        )


@dataclass(frozen=True)
class Choice:
    index: int
    prompt: int  # which prompt it answers: each prompt's tokens count once in usage
    opts: backend_pb2.PredictOptions
    echo: str = ""  # completions' `echo`: the prompt text before the completion


@dataclass(frozen=True)
class Plan:
    """The choices of one request and how to answer them."""

    choices: list[Choice]
    max_tokens: int
    chat: bool
    prompt_param: str  # the field named when a prompt is too long
    logprobs: bool


def _shifted_seed(seed: int, offset: int) -> int:
    """`seed + offset`, wrapped into int32 (PredictOptions.Seed)."""
    return (seed + offset + (1 << 31)) % _INT32 - (1 << 31)


def replicate(opts: backend_pb2.PredictOptions, n: int, prompt: int, echo: str = "") -> list[Choice]:
    """`n` choices of one prompt (indexes `prompt * n` on)."""
    out = []
    for i in range(n):
        copy = opts
        if i:
            copy = backend_pb2.PredictOptions()
            copy.CopyFrom(opts)
            copy.CorrelationId = os.urandom(16).hex()
            if opts.Seed:
                copy.Seed = _shifted_seed(opts.Seed, i)
        out.append(Choice(prompt * n + i, prompt, copy, echo))
    return out


def usage_of(choices: Sequence[Choice], replies: Sequence[backend_pb2.Reply]) -> dict[str, int]:
    """Usage of several choices: every completion token, each prompt's tokens once."""
    prompts = {choice.prompt: reply.prompt_tokens for choice, reply in zip(choices, replies, strict=True)}
    return usage(sum(prompts.values()), sum(reply.tokens for reply in replies))


async def _gather(coros: list[Awaitable[Any]]) -> list[Any]:
    """All results, in order; the first failure cancels the calls still running and is raised."""
    tasks = [asyncio.ensure_future(coro) for coro in coros]
    try:
        return await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()


async def unary(
    router: Router,
    cfg: ModelConfig,
    plan: Plan,
    head: dict[str, Any],
    max_concurrent: int,
    message_of: MessageOf,
    headers_of: HeadersOf,
) -> Response:
    slots = asyncio.Semaphore(max_concurrent)

    async def call(choice: Choice) -> tuple[backend_pb2.Reply, Replica]:
        async with slots, http_errors(router, cfg, plan.prompt_param):
            return await calls.unary(router, cfg, "Predict", choice.opts)
        raise AssertionError("unreachable")  # http_errors re-raises every error it catches

    answers = await _gather([call(choice) for choice in plan.choices])
    replies = [reply for reply, _ in answers]
    out = []
    for choice, reply in zip(plan.choices, replies, strict=True):
        items = logprobs.entries(reply) if plan.logprobs else []
        if plan.chat:
            message, finish = message_of(reply, plan.max_tokens)
            out.append(
                {
                    "index": choice.index,
                    "message": message,
                    "logprobs": logprobs.chat(items) if plan.logprobs else None,
                    "finish_reason": finish,
                }
            )
        else:
            text = choice.echo + reply.message.decode(errors="replace")
            shaped = logprobs.CompletionLogprobs(len(choice.echo)).shape(items) if plan.logprobs else None
            out.append(
                {
                    "index": choice.index,
                    "text": text,
                    "logprobs": shaped,
                    "finish_reason": finish_reason(reply.tokens, plan.max_tokens),
                }
            )
    body = {**head, "choices": out, "usage": usage_of(plan.choices, replies)}
    return Response(orjson.dumps(body), media_type="application/json", headers=headers_of(answers[-1][1]))


def error_events(exc: BackendCallError | Queued) -> bytes:
    """A stream's failure after its first byte (a later choice's call): an error event, then the end."""
    code = (
        exc.code
        if isinstance(exc, Queued)
        else "backend_timeout"
        if isinstance(exc, BackendTimeout)
        else "backend_error"
    )
    return sse({"error": {"message": str(exc), "type": "server_error", "code": code}}) + DONE


class Streams:
    """The one stream open at a time; closed with the response, however it ends."""

    def __init__(self, first: calls.ReplyStream) -> None:
        self.current = first

    def close(self) -> None:
        self.current.close()


async def stream(
    router: Router,
    cfg: ModelConfig,
    plan: Plan,
    head: dict[str, Any],
    include_usage: bool,
    headers_of: HeadersOf,
) -> tuple[AsyncIterator[bytes], Streams, dict[str, str]]:
    """The events of every choice's stream, the streams to close with the response, and its headers."""
    async with http_errors(router, cfg, plan.prompt_param):  # the first choice's errors before the first byte
        first, opened = await calls.open_stream(router, cfg, plan.choices[0].opts)
    streams = Streams(opened)

    async def events() -> AsyncIterator[bytes]:
        totals: list[backend_pb2.Reply] = []
        reply = first
        try:
            for number, choice in enumerate(plan.choices):
                if number:
                    reply, streams.current = await calls.open_stream(router, cfg, choice.opts)
                async for event in _relay(plan, head, choice, reply, streams.current, totals):
                    yield event
                streams.current.close()
        except (BackendCallError, Queued) as exc:  # after the first byte, an error can only be an event
            yield error_events(exc)
            return
        finally:
            streams.close()
        if include_usage:
            yield sse({**head, "choices": [], "usage": usage_of(plan.choices, totals)})
        yield DONE

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **(headers_of(opened.replica) or {})}
    return events(), streams, headers


async def _relay(
    plan: Plan,
    head: dict[str, Any],
    choice: Choice,
    reply: Any,
    opened: calls.ReplyStream,
    totals: list[backend_pb2.Reply],
) -> AsyncIterator[bytes]:
    """One choice's chunks: its pieces (with their logprobs), then its finish; its final reply joins `totals`."""

    def chunk(
        fields: dict[str, Any], items: list[dict[str, Any]] | None = None, finish: str | None = None
    ) -> bytes:
        shaped = None
        if plan.logprobs and items is not None:
            shaped = logprobs.chat(items) if plan.chat else completion.shape(items)
        return sse(
            {
                **head,
                "choices": [{"index": choice.index, **fields, "logprobs": shaped, "finish_reason": finish}],
            }
        )

    completion = logprobs.CompletionLogprobs(len(choice.echo))
    text_key = "delta" if plan.chat else "text"
    if plan.chat:
        yield chunk({"delta": {"role": "assistant", "content": ""}})
    elif choice.echo:
        yield chunk({"text": choice.echo})
    final, called = backend_pb2.Reply(), False
    while reply is not calls.EOF:
        items = logprobs.entries(reply) if plan.logprobs else None
        if reply.message or items:
            text = reply.message.decode(errors="replace")
            yield chunk({text_key: {"content": text} if plan.chat else text}, items)
        if plan.chat and reply.chat_deltas and (deltas := delta_tool_calls(reply)):
            yield chunk({"delta": {"tool_calls": deltas}})
            called = True
        if reply.tokens or reply.prompt_tokens:  # the final reply carries the counts
            final = reply
        reply = await opened.read()
    totals.append(final)
    finish = finish_reason(final.tokens, plan.max_tokens)
    finish = "tool_calls" if called and finish == "stop" else finish  # a call cut by max_tokens is "length"
    yield chunk({"delta": {}} if plan.chat else {"text": ""}, finish=finish)


def response_head(ident: str, model: str, *, chat: bool, streamed: bool) -> dict[str, Any]:
    kind = ("chat.completion.chunk" if streamed else "chat.completion") if chat else "text_completion"
    return {"id": ident, "object": kind, "created": int(time.time()), "model": model}
