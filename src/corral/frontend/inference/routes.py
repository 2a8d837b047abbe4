"""A request whose `model` names a model route (models/routes.py): served by the chosen target, or by the
route's fallbacks in order when that target cannot serve (issue 25 item 4).

"Cannot serve" is what leaves the client without a byte: no capacity (no node can take the model, its
queue is full or its wait ran out, its load failed or still runs past the wait budget) or a backend call
that failed before its first reply (a stream's handler returns only after its first reply, so an error
from a handler is always before the first byte). An error that blames the request (a prompt too long,
an invalid field) is answered as it is: another model would refuse it too.

The answer names the route (`x-corral-route`) and the model that served it (`x-corral-route-target`,
and the body's `model`). A request for a model, not a route, costs one dict lookup here.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from starlette.responses import Response

from corral.frontend.errors import APIError
from corral.frontend.inference.fast_path import InferenceRoute, InferenceTable, Receive, Scope, Send
from corral.frontend.state import FrontendState
from corral.loading.errors import LoadError, ModelStillLoading
from corral.placement.errors import PlacementError
from corral.routing.errors import BackendCallError, BackendRefused
from corral.tenancy.policy import GRANTED_BY_ROUTE, REFUSED_MODEL, model_refusal

log = logging.getLogger(__name__)

ROUTE_HEADER = "x-corral-route"
TARGET_HEADER = "x-corral-route-target"
_NO_CAPACITY = (PlacementError, LoadError, ModelStillLoading, BackendCallError)
_ATTEMPT_MESSAGE_MAX = 500  # characters of each failed target's message quoted in the final error

Handler = Callable[[Any], Awaitable[Response]]


def worth_a_fallback(exc: APIError) -> bool:
    """Whether the target could not serve (try the next one), rather than the request being wrong."""
    if "queue" in exc.extra:  # routing/queue.py's Queued (QueueFull, QueueTimeout): no capacity now
        return True
    cause = exc.__context__  # what http_errors mapped (it raises `from None`, which keeps the context)
    if isinstance(cause, BackendRefused):
        return not cause.invalid_request
    if isinstance(cause, _NO_CAPACITY):
        return True
    return exc.code == "model_not_found"  # a target deleted or disabled since the route was written


def _served_by(state: FrontendState, model: str) -> str:
    return model if model in state.configs else state.aliases.get(model, model)


def _exhausted(route: str, attempts: list[dict[str, Any]], last: APIError | None) -> APIError:
    if last is None:
        return APIError(
            404, f"route {route!r} leads to no model", "invalid_request_error", "model_not_found", "model"
        )
    tried = "; ".join(f"{a['model']}: {a['message']}" for a in attempts)
    return APIError(
        last.status,
        f"route {route!r}: no target could serve the request; tried {tried}",
        last.type,
        last.code,
        "model",
        headers={**last.headers, ROUTE_HEADER: route},
        extra={**last.extra, "route": route, "attempts": attempts},
    )


ServeModel = Callable[[str], Awaitable[Response]]  # the request, served by one model (a route's candidate)


async def serve_route(state: FrontendState, route: str, candidates: list[str], serve: ServeModel) -> Response:
    """Try `candidates` (a route's plan) in order until one serves. A key allowed the route may use its targets."""
    if (refused := model_refusal(route)) is not None:
        raise APIError(403, refused, "invalid_request_error", REFUSED_MODEL, "model")
    granted = GRANTED_BY_ROUTE.set(frozenset(candidates))
    try:
        return await _serve_in_order(state, route, candidates, serve)
    finally:
        GRANTED_BY_ROUTE.reset(granted)


def route_plan(state: FrontendState, model: str) -> list[str] | None:
    """The candidates of a request naming a route, in order; None for a model (one dict lookup)."""
    if not state.routes.routes or not is_route(state, model):
        return None
    return state.routes.plan(model) or []


async def _serve_in_order(
    state: FrontendState, route: str, candidates: list[str], serve: ServeModel
) -> Response:
    attempts: list[dict[str, Any]] = []
    last: APIError | None = None
    for model in candidates:
        try:
            response = await serve(model)
        except APIError as exc:
            exc.headers = {**exc.headers, ROUTE_HEADER: route, TARGET_HEADER: _served_by(state, model)}
            if not worth_a_fallback(exc):
                raise
            log.info(
                "route %s: %s could not serve (%s %s); trying the next target",
                route,
                model,
                exc.status,
                exc.code,
            )
            attempts.append(
                {
                    "model": model,
                    "status": exc.status,
                    "code": exc.code,
                    "message": exc.message[:_ATTEMPT_MESSAGE_MAX],
                }
            )
            last = exc
            continue
        response.headers[ROUTE_HEADER] = route
        response.headers[TARGET_HEADER] = _served_by(state, model)
        return response
    raise _exhausted(route, attempts, last)


def is_route(state: FrontendState, name: str) -> bool:
    """A model or alias keeps its name even when a route takes it too (the route's view says so)."""
    return name in state.routes.routes and name not in state.configs and name not in state.aliases


# What the request that is answered outside the inference table (responses, media, agent jobs) was routed
# to: [route, target], filled by route_target and sent as headers by RouteHeaders.
ROUTED: ContextVar[list[str] | None] = ContextVar("corral_routed", default=None)


def route_target(state: FrontendState, model: str) -> str:
    """Where fallbacks are not tried (config_for: media, agent jobs): a route's chosen target."""
    if not state.routes.routes or not is_route(state, model):
        return model
    target = state.routes.pick(model)
    if (routed := ROUTED.get()) is not None:
        routed[:] = [model, _served_by(state, target)]
    return target


class RouteHeaders:
    """Names the route and its target on the answers of the routes outside the inference table (whose
    handlers serve_route wraps): an ASGI layer, passed through at once while no route exists."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], state: FrontendState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.state.routes.routes or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        routed: list[str] = []
        token = ROUTED.set(routed)

        async def send_named(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start" and routed:
                named = [
                    (ROUTE_HEADER.encode(), routed[0].encode()),
                    (TARGET_HEADER.encode(), routed[1].encode()),
                ]
                message = {**message, "headers": [*message.get("headers", ()), *named]}
            await send(message)

        try:
            await self.app(scope, receive, send_named)
        finally:
            ROUTED.reset(token)


def _through_routes(state: FrontendState, handler: Handler) -> Handler:
    async def handle(body: Any) -> Response:
        if not state.routes.routes or not is_route(state, body.model):  # no routes: one attribute read
            return await handler(body)

        def serve(model: str) -> Awaitable[Response]:
            return handler(body.model_copy(update={"model": model}))

        return await serve_route(state, body.model, state.routes.plan(body.model) or [], serve)

    return handle


def routed_table(state: FrontendState, table: InferenceTable) -> InferenceTable:
    """The inference table with each handler resolving model routes first."""
    return tuple(InferenceRoute(r.path, r.request, _through_routes(state, r.handler)) for r in table)
