"""A warm chat completion answered from the HTTP server's own callbacks: no task, no ASGI message, no await.

The direct path (direct_path.py) still runs each request as an asyncio task through the fast path's handler:
a coroutine per layer (route, queue, attempts, call errors, the lane call), each awaiting the next, about 350
Python calls a request. For the common case none of them decides anything that is not known at once: a
non-streamed chat request with one choice, a configured model (no route, no agent loop, no images) whose key
may call it, tracing off, a warm replica with a free slot and nobody queued (no breaker tripped, no prefix
routing among several replicas), and that replica's fast lane connected. For it the HTTP server
(runtime/httpguard.py) holds the request until its body is whole and calls `take`, which validates the body
with the same pydantic model, builds the same backend request (`chat_wire.chat_options`), takes the slot
(`Router.checkout_now`) and sends the lane's CALL frame with a `HotCall` as the call. When the lane's REPLY
arrives (in the lane connection's `data_received`) the call answers the client in one write with the same
`chat.completion` object (`chat_wire.chat_completion`), counted as the fast path counts it (usage, fair share,
request figures).

Everything else keeps its one path, and its answers:
* `take` returns False for any request outside the common case, having taken nothing; the HTTP server then runs
  the direct path's task, which answers it (a refusal, a queue wait, a cold load, a stream) as before.
* A call that fails (an ERROR frame, the lane lost, its deadline, CORRAL_BACKEND_CALL_TIMEOUT, passed) continues
  as a task in `routing.calls.unary_after`: judged, retried on another replica within its budget, or mapped to
  the same error envelope, exactly as a call the task path made.
* A client that goes away cancels the call (CANCEL on the lane: the generation stops) and frees its slot.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import grpc
import orjson
from google.protobuf.message import DecodeError
from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.responses import Response
from uvicorn.protocols.http.httptools_impl import HEADER_VALUE_RE

from corral.frontend.access import KeyAccess
from corral.frontend.errors import unexpected_response
from corral.frontend.inference import images
from corral.frontend.inference.call_errors import http_errors
from corral.frontend.inference.chat_wire import chat_completion, chat_options, node_header
from corral.frontend.inference.fast_path import FastPath, InferenceRoute, Receive, Scope, Send, answered
from corral.frontend.inference.openai import chat_response, configured
from corral.frontend.inference.routes import is_route
from corral.frontend.inference.schemas import ChatCompletionRequest
from corral.frontend.limits import RequestLimitsMiddleware
from corral.frontend.state import FrontendState
from corral.lane import frames
from corral.lane.client import deadline_exceeded, rpc_error
from corral.models.config import ModelConfig
from corral.proto import backend_pb2 as pb
from corral.routing import calls
from corral.routing.replica import Replica
from corral.runtime.httpguard import LeanCycle
from corral.telemetry import tracing
from corral.tenancy.caller import ANONYMOUS, CURRENT, Caller
from corral.tenancy.policy import CURRENT_POLICY

log = logging.getLogger(__name__)

CHAT_PATH = "/v1/chat/completions"
VALIDATE = ChatCompletionRequest.__pydantic_validator__.validate_python
PREDICT = frames.METHODS["Predict"]


OUTCOMES = ("answered", "waited", "continued", "declined", "left")


class HotPath:
    def __init__(self, state: FrontendState, limits: RequestLimitsMiddleware, fast: FastPath) -> None:
        self.state, self.limits, self.fast = state, limits, fast
        # what became of the requests offered to `take` (`corral_hot_path_requests_total`, read when scraped):
        self.counts = dict.fromkeys(OUTCOMES, 0)
        _collector.active = self

    def holds(self, route: InferenceRoute[Any]) -> bool:
        """Whether a request for `route` may be answered by `take` once its body is whole."""
        return route.path == CHAT_PATH and tracing.tracer is None

    def take(self, cycle: LeanCycle, route: InferenceRoute[Any], access: KeyAccess | None) -> bool:
        """Send the request in `cycle` (its body whole) to a warm replica's lane, answered when the reply comes;
        False: nothing taken, the request takes the task path."""
        if self._take(cycle, access):
            return True
        self.counts["declined"] += 1
        return False

    def _take(self, cycle: LeanCycle, access: KeyAccess | None) -> bool:
        started_s = time.perf_counter()
        # a refusal (a field, a schema, an unknown model) raises: the task path answers it, naming what it names
        try:
            planned = self._plan(cycle.body, access)
        except Exception:
            return False
        if planned is None:
            return False
        cfg, model, opts, max_tokens = planned
        caller = ANONYMOUS if access is None else access.caller
        call = HotCall(self, cycle, access, caller, cfg, model, opts, max_tokens, started_s)
        self.limits.in_flight += 1
        try:
            in_task = call.send()
        except Exception:  # a bug: the router's own call in a task raises it again, where its answer is made
            log.exception("hot path: sending a planned call failed; it is made in a task")
            in_task = functools.partial(calls.unary, self.state.router, cfg, "Predict", opts)
        if in_task is not None:  # the call as a task, as planned
            self.counts["waited"] += 1
            cycle.start_task(call.as_task(in_task))
        return True

    def _plan(
        self, raw: bytes | bytearray, access: KeyAccess | None
    ) -> tuple[ModelConfig, str, pb.PredictOptions, int] | None:
        """The request's model config, requested name, backend call and token budget when it is in the warm case
        (None: outside it); raises what the task path would answer. No side effect."""
        data = orjson.loads(raw)
        if type(data) is dict and data.get("stream") is True:
            return None  # a stream takes the task path: not validated here as well as there
        body = VALIDATE(data)  # model_validate without its Python frame
        state, model = self.state, body.model
        if (
            body.stream
            or body.several_or_logprobs()
            or (access is not None and access.policy is not None and not access.policy.allows(model))
            or (state.routes.routes and is_route(state, model))
        ):
            return None
        # config_for's lookup, without its refusals and routes (a key's policy is checked above, routes are
        # declined): an unknown or disabled model takes the task path, which names what is wrong
        cfg = configured(state, model)
        if (
            cfg is None
            or cfg.disabled
            or (cfg.mcp and body.tools is None and state.agents is not None)
            or images.has_images(body.messages)
        ):
            return None
        opts, max_tokens = chat_options(cfg, body)
        return cfg, model, opts, max_tokens


class HotCall:
    """One request's lane call, answered from the lane's callbacks (`routing.calls`' unary call, inlined)."""

    __slots__ = (
        "hot",
        "cycle",
        "access",
        "caller",
        "cfg",
        "model",
        "replica",
        "opts",
        "max_tokens",
        "started_s",
        "lane",
        "call_id",
        "due_s",
        "ident",
        "created",
        "ended",
    )
    unary = True

    def __init__(
        self,
        hot: HotPath,
        cycle: LeanCycle,
        access: KeyAccess | None,
        caller: Caller,
        cfg: ModelConfig,
        model: str,
        opts: pb.PredictOptions,
        max_tokens: int,
        started_s: float,
    ) -> None:
        self.hot, self.cycle, self.access, self.caller = hot, cycle, access, caller
        self.cfg, self.model, self.opts = cfg, model, opts
        self.max_tokens, self.started_s = max_tokens, started_s
        self.ident = (
            "chatcmpl-" + opts.CorrelationId
        )  # one id: the backend's logs name the call the client got
        self.created = int(time.time())
        self.ended = False

    def send(self) -> Callable[[], Awaitable[tuple[pb.Reply, Replica]]] | None:
        """Take a free slot of a warm replica and send the call on its lane (None); or the call to make in a task:
        the router's own when no slot is free at once, the model is cold, or the router picks with the prompt
        (prefix routing among replicas); over gRPC on the replica taken when it has no lane (yet)."""
        router, cfg, opts = self.hot.state.router, self.cfg, self.opts
        if router.prefix_chain(cfg, opts) is not None:
            return lambda: calls.unary(router, cfg, "Predict", opts)
        replica = router.checkout_now(cfg, self.caller)
        if replica is None:
            return lambda: calls.unary(router, cfg, "Predict", opts)
        lane = router.channels.lane(replica.address)
        if lane is not None:
            self.lane, self.replica = lane, replica
            self.due_s = lane.loop.time() + router.channels.budgets.call_timeout_s
            try:
                self.call_id = lane.start(self, PREDICT, opts)
            except grpc.aio.AioRpcError:  # it just closed
                lane = None
        if lane is None:  # its call looks for the lane (BackendChannels.caller) and goes over gRPC meanwhile
            return lambda: calls.unary(router, cfg, "Predict", opts, first=replica)
        self.cycle.watch_disconnect(self.client_left)
        return None

    # ---- the lane's side (lane.client.LaneCall) ----

    def deliver(self, kind: int, payload: bytes) -> None:
        if self.ended:
            return
        if kind != frames.REPLY:
            self.fail(rpc_error(*frames.parse_error(payload)))
            return
        try:
            reply = pb.Reply.FromString(payload)
        except DecodeError as exc:  # as a gRPC client fails a reply it cannot parse
            self.fail(rpc_error(grpc.StatusCode.INTERNAL, f"failed to parse the reply: {exc}"))
            return
        hot, cfg, replica = self.hot, self.cfg, self.replica
        router = hot.state.router
        router.view.breakers.succeeded(replica)
        router.served("Predict", cfg.name, reply, self.caller)
        self._end()
        hot.limits.in_flight -= 1
        cycle, status = self.cycle, 200
        try:
            content = orjson.dumps(
                chat_completion(cfg.name, self.ident, self.created, self.max_tokens, reply)
            )
            named = node_header(hot.state, replica)
            extra = _header_lines(named)
            if (extra is None or not cycle.answer_json(content, extra)) and not cycle.disconnected:
                # writing is paused (a client that does not read), or a header value `send` refuses: their path
                cycle.start_task(Response(content, headers=named, media_type="application/json"))
        except Exception as error:  # the envelope, never a connection left without an answer
            response = unexpected_response(error)
            status = response.status_code
            if not cycle.response_started and not cycle.disconnected:
                cycle.start_task(response)
        hot.counts["answered"] += 1
        hot.fast.figures.observe(self.model, status, time.perf_counter() - self.started_s)

    def fail(self, exc: BaseException) -> None:
        """The call failed before a reply: what `routing.calls.unary` does next, in a task."""
        if self.ended:
            return
        self._end()
        self.lane.cancel(self.call_id)  # a no-op when the lane forgot it (its reply or error came)
        spent_s = time.perf_counter() - self.started_s
        self.hot.counts["continued"] += 1
        error = (
            exc if isinstance(exc, grpc.aio.AioRpcError) else rpc_error(grpc.StatusCode.UNAVAILABLE, str(exc))
        )
        replica = self.replica
        self.cycle.start_task(
            self.as_task(
                lambda: calls.unary_after(
                    self.hot.state.router, self.cfg, "Predict", self.opts, replica, error, spent_s
                )
            )
        )

    def expire(self) -> None:
        self.fail(deadline_exceeded())

    # ---- the client's side ----

    def client_left(self) -> None:
        """The connection closed before the answer: stop the generation, give the slot back."""
        if self.ended:
            return
        self._end()
        self.lane.cancel(self.call_id)
        self.hot.limits.in_flight -= 1
        self.hot.counts["left"] += 1

    def _end(self) -> None:
        self.ended = True
        self.cycle.watch_disconnect(None)
        router = self.hot.state.router
        router.release(self.replica)
        router.view.breakers.abandoned(
            self.replica
        )  # a half-open trial that reached no verdict is free again

    def as_task(self, call: Callable[[], Awaitable[tuple[pb.Reply, Replica]]]) -> Any:
        """The ASGI app that makes the backend call `call` in a task and answers it as the fast path answers
        (its errors, the client going away, the figures): what the task path's chat handler would do next."""
        hot, cfg = self.hot, self.cfg
        state = hot.state

        async def rest() -> Response:
            async with http_errors(state.router, cfg, "messages"):
                reply, replica = await call()
            return chat_response(state, cfg, self.ident, self.created, self.max_tokens, reply, replica)

        async def answer() -> tuple[Response, str]:
            return await answered(rest), self.model

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            if self.access is not None:  # this task's own context: nothing to reset
                CURRENT.set(self.access.caller)
                CURRENT_POLICY.set(self.access.policy)
            try:
                await hot.fast.respond(scope, receive, send, answer, self.started_s)
            finally:
                hot.limits.in_flight -= 1

        return app


def _header_lines(headers: dict[str, str] | None) -> bytes | None:
    """`headers` as header lines for `LeanCycle.answer_json`; None when a value is one uvicorn's `send` refuses
    (it answers 500 on it, as before)."""
    if headers is None:
        return b""
    lines = b""
    for name, value in headers.items():
        raw = value.encode("latin-1", errors="replace")
        if HEADER_VALUE_RE.search(raw):
            return None
        lines += name.lower().encode("latin-1") + b": " + raw + b"\r\n"
    return lines


class _Collector(Collector):
    """`corral_hot_path_requests_total` of the frontend that started last in the process (plain counts on the
    warm path, turned into a family when scraped)."""

    active: HotPath | None = None

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(
            "corral_hot_path_requests",
            "Warm chat requests offered to the hot path (frontend/hot_path.py), by outcome: answered from callbacks "
            "without a task; waited (its call made in a task: no slot free at once, no fast lane, prefix routing); "
            "continued as a task after a failed first try (retried or answered with its error); "
            "declined (outside the warm case: served as before); left (the client went away first)",
            labels=["outcome"],
        )
        counts = self.active.counts if self.active is not None else dict.fromkeys(OUTCOMES, 0)
        for outcome in OUTCOMES:
            family.add_metric([outcome], counts[outcome])
        return [family]


_collector = _Collector()
REGISTRY.register(_collector)
