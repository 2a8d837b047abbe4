"""A warm chat completion answered from the HTTP server's own callbacks: no task, no ASGI message, no await.

The direct path (direct_path.py) still runs each request as an asyncio task through the fast path's handler:
a coroutine per layer (route, queue, attempts, call errors, the lane call), each awaiting the next, about 350
Python calls a request. For the common case none of them decides anything that is not known at once: a
non-streamed chat request with one choice, a configured model (no route, no agent loop, no images) whose key
may call it, tracing off, a warm replica with a free slot and nobody queued (no breaker tripped, no prefix
routing among several replicas), and that replica's fast lane connected. For it the HTTP server
(runtime/httpguard.py) holds the request until its body is whole and calls `take`, which validates the body
with the same pydantic model, builds the same backend request (`openai.chat_options`), takes the slot
(`Router.checkout_now`) and sends the lane's CALL frame with a `HotCall` as the call. When the lane's REPLY
arrives (in the lane connection's `data_received`) the call answers the client in one write with the same
`chat.completion` object (`openai.chat_completion`), counted as the fast path counts it (usage, fair share,
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

import time
from typing import Any

import grpc
import orjson
from pydantic import ValidationError
from starlette.responses import Response

from corral.frontend.access import KeyAccess
from corral.frontend.inference import images
from corral.frontend.inference.call_errors import http_errors
from corral.frontend.inference.fast_path import FastPath, InferenceRoute, Receive, Scope, Send, answered
from corral.frontend.inference.openai import (
    chat_completion,
    chat_options,
    chat_response,
    config_for,
    node_header,
    random_id,
)
from corral.frontend.inference.routes import is_route
from corral.frontend.inference.schemas import ChatCompletionRequest
from corral.frontend.limits import RequestLimitsMiddleware
from corral.frontend.state import FrontendState
from corral.lane import frames
from corral.lane.client import LaneConnection, deadline_exceeded, rpc_error
from corral.models.config import ModelConfig
from corral.proto import backend_pb2 as pb
from corral.routing import calls
from corral.routing.replica import Replica
from corral.runtime.httpguard import LeanCycle
from corral.telemetry import tracing
from corral.tenancy.caller import ANONYMOUS, CURRENT, Caller
from corral.tenancy.policy import CURRENT_POLICY

CHAT_PATH = "/v1/chat/completions"
PREDICT = frames.METHODS["Predict"]
JSON_HEADERS = [(b"content-type", b"application/json")]


class HotPath:
    def __init__(self, state: FrontendState, limits: RequestLimitsMiddleware, fast: FastPath) -> None:
        self.state, self.limits, self.fast = state, limits, fast

    def holds(self, route: InferenceRoute[Any]) -> bool:
        """Whether a request for `route` may be answered by `take` once its body is whole."""
        return route.path == CHAT_PATH and tracing.tracer is None

    def take(self, cycle: LeanCycle, route: InferenceRoute[Any], access: KeyAccess | None) -> bool:
        """Send the request in `cycle` (its body whole) to a warm replica's lane, answered when the reply comes;
        False: nothing taken, the request takes the task path."""
        started_s = time.perf_counter()
        try:
            body = ChatCompletionRequest.model_validate(orjson.loads(cycle.body))
        except (orjson.JSONDecodeError, ValidationError):
            return False  # the task path answers it, naming the field
        state, model = self.state, body.model
        if (
            body.stream
            or body.several_or_logprobs()
            or (access is not None and access.policy is not None and not access.policy.allows(model))
            or (state.routes.routes and is_route(state, model))
        ):
            return False
        try:
            cfg = config_for(state, model)
        except Exception:  # an unknown or disabled model: its answer comes from the task path
            return False
        if (cfg.mcp and body.tools is None and state.agents is not None) or images.has_images(body.messages):
            return False
        opts, max_tokens = chat_options(cfg, body)
        router = state.router
        if router.prefix_chain(cfg, opts) is not None:
            return False
        caller = ANONYMOUS if access is None else access.caller
        replica = router.checkout_now(cfg, caller)
        if replica is None:
            return False
        lane = router.channels.lane(replica.address)
        call = HotCall(self, cycle, access, caller, cfg, model, replica, opts, max_tokens, started_s)
        try:
            if lane is None:
                raise LookupError(replica.address)
            call.send(lane)
        except (LookupError, grpc.aio.AioRpcError):  # no lane, or it just closed: the task path's gRPC call
            router.release(replica)
            return False
        self.limits.in_flight += 1
        cycle.watch_disconnect(call.client_left)
        return True


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
        replica: Replica,
        opts: pb.PredictOptions,
        max_tokens: int,
        started_s: float,
    ) -> None:
        self.hot, self.cycle, self.access, self.caller = hot, cycle, access, caller
        self.cfg, self.model, self.replica, self.opts = cfg, model, replica, opts
        self.max_tokens, self.started_s = max_tokens, started_s
        self.ident, self.created = f"chatcmpl-{random_id()}", int(time.time())
        self.ended = False

    def send(self, lane: LaneConnection) -> None:
        self.lane = lane
        self.due_s = lane.loop.time() + self.hot.state.router.channels.budgets.call_timeout_s
        self.call_id = lane.start(self, PREDICT, self.opts)

    # ---- the lane's side (lane.client.LaneCall) ----

    def deliver(self, kind: int, payload: bytes) -> None:
        if self.ended:
            return
        if kind != frames.REPLY:
            self.fail(rpc_error(*frames.parse_error(payload)))
            return
        reply = pb.Reply.FromString(payload)
        router, cfg, replica = self.hot.state.router, self.cfg, self.replica
        router.view.breakers.succeeded(replica)
        router.served("Predict", cfg.name, reply, self.caller)
        self._end()
        self.hot.limits.in_flight -= 1
        content = orjson.dumps(chat_completion(cfg.name, self.ident, self.created, self.max_tokens, reply))
        headers = _raw(node_header(self.hot.state, replica))
        headers.append((b"content-length", str(len(content)).encode()))
        headers.extend(JSON_HEADERS)
        cycle = self.cycle
        if not cycle.answer(200, headers, content) and not cycle.disconnected:  # writing is paused: await it
            response = Response(
                content, headers=node_header(self.hot.state, replica), media_type="application/json"
            )
            cycle.start_task(response)
        self.hot.fast.figures.observe(self.model, 200, time.perf_counter() - self.started_s)

    def fail(self, exc: BaseException) -> None:
        """The call failed before a reply: what `routing.calls.unary` does next, in a task."""
        if self.ended:
            return
        self._end()
        self.lane.cancel(self.call_id)  # a no-op when the lane forgot it (its reply or error came)
        spent_s = time.perf_counter() - self.started_s
        error = (
            exc if isinstance(exc, grpc.aio.AioRpcError) else rpc_error(grpc.StatusCode.UNAVAILABLE, str(exc))
        )
        self.cycle.start_task(self._after(error, spent_s))

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

    def _end(self) -> None:
        self.ended = True
        self.cycle.watch_disconnect(None)
        router = self.hot.state.router
        router.release(self.replica)
        router.view.breakers.abandoned(
            self.replica
        )  # a half-open trial that reached no verdict is free again

    def _after(self, exc: grpc.aio.AioRpcError, spent_s: float) -> Any:
        """The ASGI app of the rest: judge the failure, retry or answer its error (the fast path's answer)."""
        hot, cfg, opts = self.hot, self.cfg, self.opts
        state = hot.state

        async def rest() -> Response:
            async with http_errors(state.router, cfg, "messages"):
                reply, replica = await calls.unary_after(
                    state.router, cfg, "Predict", opts, self.replica, exc, spent_s
                )
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


def _raw(headers: dict[str, str] | None) -> list[tuple[bytes, bytes]]:
    return (
        []
        if headers is None
        else [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    )
