"""Backend calls through the router: pick a replica, call it within a budget, judge a failure, retry before the
first byte.

* A request counts as in flight from the pick (`Router.checkout`) until its call ends, so eviction
  and scale-down never stop a replica that is serving it (prefill included).
* Every call is bounded: unary calls by a deadline (CORRAL_BACKEND_CALL_TIMEOUT), streams by a
  first-token budget (CORRAL_STREAM_FIRST_TOKEN_TIMEOUT) and an idle budget between replies
  (CORRAL_STREAM_IDLE_TIMEOUT). On a timeout the replica is health-probed and dropped only if the
  probe fails; a slow but alive backend is kept (and the timeout counts against its circuit breaker).
* A failure is judged (`_judge`): a replica that answers "gone" (model freed, identity changed), or UNAVAILABLE
  and then no health probe, is dropped; a live replica's failure counts against its circuit breaker
  (routing/breaker.py), which takes it out of picking after CORRAL_BREAKER_FAILURES in a row.
* Retried, on another replica when there is one, after a jittered backoff and within the call's own budget, at
  most CORRAL_BACKEND_RETRIES times: a call that failed before its first byte because its replica is gone, was
  UNAVAILABLE, or failed in a way that opened its breaker. Never retried: a timeout (a unary call that timed
  out may have generated; a stream that sent nothing in its first-token budget is slow, not unreachable), a
  refused request, anything after the first reply of a stream (open_stream returns it; the handler may have
  sent bytes since).
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
from corral.routing.breaker import BreakerState, avoided
from corral.routing.errors import CLIENT_CODES, BackendRefused, BackendTimeout, ReplicasUnavailable
from corral.routing.replica import Replica
from corral.routing.router import Router
from corral.runtime.loops import backoff_s
from corral.telemetry import tracing
from corral.telemetry.families import BACKEND_RETRIES

log = logging.getLogger(__name__)

EOF = grpc.aio.EOF
RETRY_BACKOFF_MAX_S = 1.0  # the pause before a retry doubles up to this (and never past the call's budget)
RETRY_JITTER = 0.5  # up to half of each pause is taken off at random: frontends that failed together spread
# Statuses that blame the replica, not the request: they count against its circuit breaker. UNAVAILABLE and
# "gone" (replica_gone) are judged on their own; a timeout in `_timed_out`.
SERVER_FAILURES = frozenset({grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DATA_LOSS})


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
    """Probe the replica that ran out of time: forget it only when it does not answer Health either (a live one
    keeps serving, and the timeout counts against its breaker)."""
    alive = await router.channels.healthy(replica.address)
    why = f"{what} within {format_duration_s(budget_s)} ({knob})"
    if alive:
        router.view.breakers.failed(replica, why)
    else:
        await router.forget(replica, f"{why} and no answer to a health probe")
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


async def _judge(router: Router, replica: Replica, exc: grpc.aio.AioRpcError) -> str | None:
    """Drop a gone replica, count a live one's failure against its breaker; the reason to retry the call (before
    its first byte) on another replica, or None when it must not be retried."""
    code, why = exc.code(), f"{exc.code().name}: {exc.details()}"
    breakers = router.view.breakers
    if (
        code == grpc.StatusCode.UNAVAILABLE
    ):  # connection refused or lost, or the backend said so: is it alive?
        if await router.channels.healthy(replica.address):
            breakers.failed(replica, why)
            return "unavailable"
        await router.forget(replica, f"{why}, and no answer to a health probe")
        return "gone"
    if replica_gone(exc):  # the backend itself says it no longer serves this model
        await router.forget(replica, why)
        return "gone"
    if code in SERVER_FAILURES:
        return "breaker_open" if breakers.failed(replica, why) is not BreakerState.CLOSED else None
    if code.name in CLIENT_CODES or code == grpc.StatusCode.FAILED_PRECONDITION:  # it answered: alive
        breakers.succeeded(replica)  # the request was wrong, or the model (as loaded) cannot serve its kind
    return None


class Attempts:
    """One call's tries: the replicas it failed on (a retry avoids them), its retries left, the budget left.

    The budget counts the backend calls and the pauses between them, not the waits for a replica (the queue and a
    cold load have their own budgets, CORRAL_QUEUE_TIMEOUT and LOCALAI_MODEL_LOAD_WAIT)."""

    def __init__(self, router: Router, cfg: ModelConfig, budget_s: float) -> None:
        self.router, self.cfg = router, cfg
        self.settings = router.view.breakers.settings
        self._loop = asyncio.get_running_loop()
        self._budget_s, self._spent_s, self._call_s = budget_s, 0.0, 0.0
        self._failed: frozenset[str] = frozenset()
        self.retries = 0

    def resume(self, spent_s: float) -> None:
        """A first try made elsewhere (frontend/hot_path.py) took `spent_s` and failed: `again` counts it."""
        self._call_s = self._loop.time() - spent_s

    def call_budget_s(self) -> float:
        """A call starts now: the budget it has (the whole budget on the first try)."""
        self._call_s = self._loop.time()
        return max(0.0, self._budget_s - self._spent_s)

    async def checkout(self, chain: list[int] | None) -> Replica:
        """A slot and a replica (avoiding those this call failed on); with every replica's breaker open, the open
        ones are probed at once and one that answers takes this request as its trial."""
        token = avoided.set(self._failed) if self._failed else None
        try:
            try:
                return await self.router.checkout(self.cfg, chain)
            except ReplicasUnavailable:
                if not await self._probe_open():
                    raise
            return await self.router.checkout(self.cfg, chain)
        finally:
            if token is not None:
                avoided.reset(token)

    async def _probe_open(self) -> bool:
        breakers = self.router.view.breakers
        due = breakers.probe_due(self.router.view.replicas_of(self.cfg.name))
        answers = await asyncio.gather(*(self.router.channels.healthy(r.address) for r in due))
        for replica, alive in zip(due, answers, strict=True):
            if alive:
                breakers.probe_passed(replica)
        return any(answers)

    async def again(self, replica: Replica, reason: str) -> bool:
        """After a retriable failure on `replica`: pause (jittered backoff) and say True when a retry is left and
        fits in the budget; False: the failure is the answer."""
        self._failed |= {replica.key}
        self._spent_s += self._loop.time() - self._call_s
        if self.retries >= self.settings.retries:
            return False
        pause_s = backoff_s(
            self.retries + 1, self.settings.retry_backoff_s, RETRY_BACKOFF_MAX_S, jitter=RETRY_JITTER
        )
        if self._spent_s + pause_s >= self._budget_s:
            return False
        self._spent_s += pause_s
        self.retries += 1
        BACKEND_RETRIES.labels(self.cfg.name, reason).inc()
        log.info(
            "retrying a call to %s (%s on %s) in %s, retry %d of %d",
            self.cfg.name,
            reason,
            replica.node_name,
            format_duration_s(pause_s),
            self.retries,
            self.settings.retries,
        )
        await asyncio.sleep(pause_s)
        return True


Staged = Callable[[Replica], AbstractAsyncContextManager[Any]]


async def unary(
    router: Router,
    cfg: ModelConfig,
    method: str,
    request: Any,
    *,
    staged: Staged | None = None,
    attempts: Attempts | None = None,
    first: Replica | None = None,
) -> tuple[Any, Replica]:
    """One unary call (`Predict`, `Embedding`, `AudioTranscription`, …) on whichever replica the router picks.

    `staged`: for a request that carries files, entered with the picked replica before the call; it stages the
    files on that replica's node and yields the request to send (naming the files' paths there), and its exit
    releases them once the call ended, however it ended (answer, error, the client going away). `attempts`: the
    tries made so far (`unary_after`); `first`: the replica of the first try, already checked out
    (frontend/hot_path.py)."""
    budget_s = router.channels.budgets.call_timeout_s
    chain = router.prefix_chain(cfg, request) if method == "Predict" else None
    if attempts is None:
        attempts = Attempts(router, cfg, budget_s)
    while True:
        if first is None:
            replica = await attempts.checkout(chain)
        else:
            replica, first = first, None
        try:
            return await _unary_once(router, cfg, method, request, staged, replica, attempts, budget_s)
        except _Retriable as failed:
            retry = failed
        finally:
            router.release(replica)
            router.view.breakers.abandoned(replica)  # a half-open trial that reached no verdict is free again
        if not await attempts.again(replica, retry.reason):
            raise retry.error from None


class _Retriable(Exception):
    """A failure before the first byte that a retry on another replica may cure."""

    def __init__(self, reason: str, error: BackendRefused) -> None:
        super().__init__(reason)
        self.reason, self.error = reason, error


async def _unary_once(
    router: Router,
    cfg: ModelConfig,
    method: str,
    request: Any,
    staged: Staged | None,
    replica: Replica,
    attempts: Attempts,
    budget_s: float,
) -> tuple[Any, Replica]:
    channels = router.channels
    span = None
    try:
        async with contextlib.AsyncExitStack() as files:
            sent = request if staged is None else await files.enter_async_context(staged(replica))
            span = None if tracing.tracer is None else _backend_span(method, cfg, replica)
            metadata = channels.metadata if span is None else tracing.metadata_for(span, channels.metadata)
            # the fast lane carries the text calls only (the trace context too: tracing keeps the transport)
            caller = channels.caller(replica.address)
            rpc = getattr(caller, method, None) or getattr(channels.stub(replica.address), method)
            call = rpc(sent, metadata=metadata, timeout=attempts.call_budget_s())
            try:
                reply = await call
            except asyncio.CancelledError:  # the client went away: stop the generation
                call.cancel()
                raise
            router.view.breakers.succeeded(replica)
            router.served(method, cfg.name, reply)
            return reply, replica
    except grpc.aio.AioRpcError as exc:
        tracing.finish(span, exc)
        span = None
        raise await _failure(router, cfg, replica, exc, budget_s) from None
    finally:
        tracing.finish(span)


async def _failure(
    router: Router, cfg: ModelConfig, replica: Replica, exc: grpc.aio.AioRpcError, budget_s: float
) -> Exception:
    """What a unary call that failed with `exc` raises: BackendTimeout, BackendRefused, or _Retriable."""
    if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:  # it may have generated: never retried
        return await _timed_out(router, cfg, replica, "no answer", budget_s, CALL_TIMEOUT_KNOB)
    reason = await _judge(router, replica, exc)
    if reason is None:
        return _refused(cfg, replica, exc)
    return _Retriable(reason, _refused(cfg, replica, exc))


async def unary_after(
    router: Router,
    cfg: ModelConfig,
    method: str,
    request: Any,
    replica: Replica,
    exc: grpc.aio.AioRpcError,
    spent_s: float,
) -> tuple[Any, Replica]:
    """`unary` from the point where its first try, on `replica` (slot released), failed with `exc` after
    `spent_s` of its budget (frontend/hot_path.py made that try): judged, then retried as `unary` would."""
    budget_s = router.channels.budgets.call_timeout_s
    attempts = Attempts(router, cfg, budget_s)
    attempts.resume(spent_s)
    failed = await _failure(router, cfg, replica, exc, budget_s)
    if not isinstance(failed, _Retriable):
        raise failed
    if not await attempts.again(replica, failed.reason):
        raise failed.error
    return await unary(router, cfg, method, request, attempts=attempts)


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
        first_token_s: float | None = None,
    ) -> None:
        """`call`: a `grpc.aio.UnaryStreamCall` or the fast lane's stream (same `read`/`cancel`); `span`: the
        call's client span when tracing, ended with the stream; `method`: what the usage is counted as;
        `first_token_s`: what is left of the first-token budget (a retry has less than the whole)."""
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
        self._started_s = self._loop.time()
        # the watchdog measures from _last_s: start it earlier by what a retry has already spent of the budget
        spent_s = 0.0 if first_token_s is None else max(0.0, self._budget_s - first_token_s)
        self._last_s = self._started_s - spent_s
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
            if exc.code() == grpc.StatusCode.UNAVAILABLE or exc.code() in SERVER_FAILURES:
                self.router.view.breakers.failed(self.replica, f"{exc.code().name}: {exc.details()}")
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
        self.router.view.breakers.succeeded(self.replica)
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
        self.router.view.breakers.abandoned(
            self.replica
        )  # a half-open trial that reached no verdict is free again
        tracing.finish(self._span)


async def open_stream(
    router: Router, cfg: ModelConfig, request: Any, method: str = "PredictStream"
) -> tuple[Any, ReplyStream]:
    """Start a stream (`PredictStream`, `TTSStream`) and read its first reply, so a failure before any byte is
    retried (see the module's docstring). Only PredictStream is routed by the prompt's prefix (the KV cache it
    may reuse).

    The caller must `close()` the stream (also when it never reads past the first reply)."""
    channels = router.channels
    chain = router.prefix_chain(cfg, request) if method == "PredictStream" else None
    attempts = Attempts(router, cfg, channels.budgets.first_token_timeout_s)
    while True:
        replica = await attempts.checkout(chain)
        span = None if tracing.tracer is None else _backend_span(method, cfg, replica)
        metadata = channels.metadata if span is None else tracing.metadata_for(span, channels.metadata)
        caller = channels.caller(replica.address)  # the fast lane carries PredictStream only, traced or not
        rpc = getattr(caller, method, None) or getattr(channels.stub(replica.address), method)
        call = rpc(request, metadata=metadata)
        stream = ReplyStream(router, cfg, replica, call, span, method, attempts.call_budget_s())
        try:
            return await stream.first(), stream
        except grpc.aio.AioRpcError as exc:
            stream.close()
            reason = await _judge(router, replica, exc)
            if reason is None or not await attempts.again(replica, reason):
                raise _refused(cfg, replica, exc) from None
        except BaseException:
            stream.close()
            raise
