"""Backend calls through the router: pick a replica, call it within a budget, drop a dead one, retry once.

* A request counts as in flight from the pick (`Router.checkout`) until its call ends, so eviction
  and scale-down never stop a replica that is serving it (prefill included).
* Every call is bounded: unary calls by a deadline (CORRAL_BACKEND_CALL_TIMEOUT), streams by a
  first-token budget (CORRAL_STREAM_FIRST_TOKEN_TIMEOUT) and an idle budget between replies
  (CORRAL_STREAM_IDLE_TIMEOUT). On a timeout the replica is health-probed and dropped only if the
  probe fails; a slow but alive backend is kept.
* A replica that answers "gone" (process died, model freed, identity changed) is dropped and the
  request retried once, before any byte reached the client.
* Cancelling the caller (client disconnect) cancels the gRPC call, so the backend stops generating.

The call goes over the backend's fast lane when it has one (`BackendChannels.caller`, a `BackendCaller`),
which fails with the same `grpc.aio.AioRpcError`s, so everything above holds for both transports. A traced
call stays on its transport: the lane carries the trace context in its frames as gRPC does in metadata.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import grpc

from corral.config.parse import format_duration_s
from corral.models.config import ModelConfig
from corral.routing.backend_client import (
    CALL_TIMEOUT_KNOB,
    FIRST_TOKEN_TIMEOUT_KNOB,
    IDLE_TIMEOUT_KNOB,
    replica_gone,
)
from corral.routing.errors import CLIENT_CODES, BackendRefused, BackendTimeout
from corral.routing.replica import Replica
from corral.routing.router import Router
from corral.telemetry import tracing

log = logging.getLogger(__name__)

ATTEMPTS = 2  # a replica that vanished is dropped and the request retried once on a fresh load
EOF = grpc.aio.EOF


def _refused(cfg: ModelConfig, replica: Replica, exc: grpc.aio.AioRpcError) -> BackendRefused:
    code, details = exc.code().name, exc.details() or ""
    message = (
        f"model {cfg.name}: {details}"
        if code in CLIENT_CODES
        else f"model {cfg.name} on node {replica.node_name}: backend error {code}: {details}"
    )
    return BackendRefused(message, model=cfg.name, node_name=replica.node_name, code=code, details=details)


async def _timed_out(
    router: Router, cfg: ModelConfig, replica: Replica, what: str, budget_s: float, knob: str
) -> BackendTimeout:
    """Probe the replica that ran out of time: forget it only when it does not answer Health either."""
    alive = await router.channels.healthy(replica.address)
    if not alive:
        await router.forget(
            replica, f"{what} within {format_duration_s(budget_s)} ({knob}) and no answer to a health probe"
        )
    verdict = (
        "the replica answered a health probe and is kept"
        if alive
        else "the replica did not answer a health probe and was dropped"
    )
    return BackendTimeout(
        f"model {cfg.name} on node {replica.node_name}: {what} within "
        f"{format_duration_s(budget_s)} (raise {knob}); {verdict}",
        model=cfg.name,
        node_name=replica.node_name,
        budget_s=budget_s,
        knob=knob,
        dropped=not alive,
    )


Staged = Callable[[Replica], AbstractAsyncContextManager[Any]]


async def unary(
    router: Router, cfg: ModelConfig, method: str, request: Any, *, staged: Staged | None = None
) -> tuple[Any, Replica]:
    """One unary call (`Predict`, `Embedding`, `AudioTranscription`, …) on whichever replica the router picks.

    `staged`: for a request that carries files, entered with the picked replica before the call; it stages the
    files on that replica's node and yields the request to send (naming the files' paths there), and its exit
    releases them once the call ended, however it ended (answer, error, the client going away)."""
    channels = router.channels
    budget_s = channels.budgets.call_timeout_s
    chain = router.prefix_chain(cfg, request) if method == "Predict" else None
    for attempt in range(ATTEMPTS):
        replica = await router.checkout(cfg, chain)
        span = None
        try:
            async with contextlib.AsyncExitStack() as files:
                sent = request if staged is None else await files.enter_async_context(staged(replica))
                span = None if tracing.tracer is None else _backend_span(method, cfg, replica)
                metadata = (
                    channels.metadata if span is None else tracing.metadata_for(span, channels.metadata)
                )
                # the fast lane carries the text calls only (the trace context too: tracing keeps the transport)
                caller = channels.caller(replica.address)
                rpc = getattr(caller, method, None) or getattr(channels.stub(replica.address), method)
                call = rpc(sent, metadata=metadata, timeout=budget_s)
                try:
                    reply = await call
                except asyncio.CancelledError:  # the client went away: stop the generation
                    call.cancel()
                    raise
                router.served(method, cfg.name, reply)
                return reply, replica
        except grpc.aio.AioRpcError as exc:
            tracing.finish(span, exc)
            span = None
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise await _timed_out(
                    router, cfg, replica, "no answer", budget_s, CALL_TIMEOUT_KNOB
                ) from None
            if replica_gone(exc):
                await router.forget(replica, f"{exc.code().name}: {exc.details()}")
                if attempt + 1 < ATTEMPTS:
                    continue
            raise _refused(cfg, replica, exc) from None
        finally:
            router.release(replica)
            tracing.finish(span)
    raise AssertionError("unreachable")


def _backend_span(method: str, cfg: ModelConfig, replica: Replica) -> Any:
    return tracing.start_client_span(
        f"backend {method}",
        {
            "rpc.system": "grpc",
            "rpc.method": method,
            "corral.model": cfg.name,
            "corral.node": replica.node_name,
            "server.address": replica.address,
        },
    )


class ReplyStream:
    """One streamed generation on one replica, in flight from the pick until `close`.

    A watchdog timer (one per budget, not one per reply) cancels the call when nothing arrived within
    the first-token budget, then within the idle budget since the last reply; the read that was
    waiting raises `BackendTimeout` naming the knob. Per reply the cost is one clock read.
    """

    def __init__(
        self,
        router: Router,
        cfg: ModelConfig,
        replica: Replica,
        call: Any,
        span: Any = None,
        method: str = "PredictStream",
    ) -> None:
        """`call`: a `grpc.aio.UnaryStreamCall` or the fast lane's stream (same `read`/`cancel`); `span`: the
        call's client span when tracing, ended with the stream; `method`: what the usage is counted as."""
        self.router, self.cfg, self.replica, self._call, self._span = router, cfg, replica, call, span
        self._method, self._counted = method, False
        budgets = router.channels.budgets
        self._idle_s = budgets.idle_timeout_s
        self._budget_s, self._knob, self._what = (
            budgets.first_token_timeout_s,
            FIRST_TOKEN_TIMEOUT_KNOB,
            "no first token",
        )
        self._loop = asyncio.get_running_loop()
        self._last_s = self._started_s = self._loop.time()
        self._timer: asyncio.TimerHandle | None = self._loop.call_at(
            self._last_s + self._budget_s, self._watch
        )
        self._expired = False
        self._closed = False

    def _watch(self) -> None:
        due_s = self._last_s + self._budget_s
        if self._loop.time() < due_s:
            self._timer = self._loop.call_at(due_s, self._watch)
            return
        self._timer = None
        self._expired = True
        self._call.cancel()

    async def read(self) -> Any:
        """The next reply, or `EOF`; raises BackendRefused, BackendTimeout."""
        try:
            return await self._read()
        except grpc.aio.AioRpcError as exc:
            raise _refused(self.cfg, self.replica, exc) from None

    async def _read(self) -> Any:
        try:
            reply = await self._call.read()
        except asyncio.CancelledError:
            if not self._expired:
                raise
            raise await _timed_out(
                self.router, self.cfg, self.replica, self._what, self._budget_s, self._knob
            ) from None
        self._last_s = self._loop.time()
        if not self._counted and reply is not EOF and (reply.tokens or reply.prompt_tokens):
            self._counted = True  # the final reply carries the stream's counts, once
            self.router.served(self._method, self.cfg.name, reply)
        return reply

    async def first(self) -> Any:
        """Read the first reply (raises AioRpcError: the caller may retry) and switch the watchdog to idle."""
        reply = await self._read()
        self.router.first_token(self.cfg.name, self._loop.time() - self._started_s)
        self._budget_s, self._knob, self._what = self._idle_s, IDLE_TIMEOUT_KNOB, "the stream sent nothing"
        if self._timer is not None:
            self._timer.cancel()
            self._timer = self._loop.call_at(self._last_s + self._budget_s, self._watch)
        return reply

    def close(self) -> None:
        """Cancel the call (the backend stops generating) and stop counting the request in flight."""
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        self._call.cancel()
        self.router.release(self.replica)
        tracing.finish(self._span)


async def open_stream(
    router: Router, cfg: ModelConfig, request: Any, method: str = "PredictStream"
) -> tuple[Any, ReplyStream]:
    """Start a stream (`PredictStream`, `TTSStream`) and read its first reply, so a dead replica is retried before
    any byte is sent. Only PredictStream is routed by the prompt's prefix (the KV cache it may reuse).

    The caller must `close()` the stream (also when it never reads past the first reply)."""
    channels = router.channels
    chain = router.prefix_chain(cfg, request) if method == "PredictStream" else None
    for attempt in range(ATTEMPTS):
        replica = await router.checkout(cfg, chain)
        span = None if tracing.tracer is None else _backend_span(method, cfg, replica)
        metadata = channels.metadata if span is None else tracing.metadata_for(span, channels.metadata)
        caller = channels.caller(replica.address)  # the fast lane carries PredictStream only, traced or not
        rpc = getattr(caller, method, None) or getattr(channels.stub(replica.address), method)
        call = rpc(request, metadata=metadata)
        stream = ReplyStream(router, cfg, replica, call, span, method)
        try:
            return await stream.first(), stream
        except grpc.aio.AioRpcError as exc:
            stream.close()
            if replica_gone(exc):
                await router.forget(replica, f"{exc.code().name}: {exc.details()}")
                if attempt + 1 < ATTEMPTS:
                    continue
            raise _refused(cfg, replica, exc) from None
        except BaseException:
            stream.close()
            raise
    raise AssertionError("unreachable")
