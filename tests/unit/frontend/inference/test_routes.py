"""A request through a model route: which errors send it to the next target (as `http_errors` maps them), the
headers naming what served, and the error naming every attempt when none could."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from starlette.responses import Response

from corral.frontend.errors import APIError
from corral.frontend.inference.call_errors import http_errors
from corral.frontend.inference.routes import route_target, serve_route, worth_a_fallback
from corral.frontend.state import FrontendState
from corral.loading.errors import LoadModelFailed, ModelStillLoading
from corral.models.config import ModelConfig
from corral.models.routes import ModelRoute, RouteTable, RouteTarget
from corral.placement.errors import NoNodeAvailable
from corral.routing.errors import BackendRefused, BackendTimeout
from corral.routing.queue import QueueFull, QueueTimeout
from corral.routing.router import Router

CFG = ModelConfig(name="a", backend="simulator", model="m.gguf", models_dir=Path("/models"))
NO_ROUTER = cast(Router, SimpleNamespace(ctx=None))


async def mapped(exc: Exception) -> APIError:
    """`exc` as the client would get it (frontend/inference/call_errors.py)."""
    with pytest.raises(APIError) as raised:
        async with http_errors(NO_ROUTER, CFG, "messages"):
            raise exc
    return raised.value


def refused(code: str) -> BackendRefused:
    return BackendRefused(f"backend: {code}", model="a", node_name="n", code=code, details="")


def timeout() -> BackendTimeout:
    return BackendTimeout("no reply", model="a", node_name="n", budget_s=1, knob="K", dropped=False)


@pytest.mark.parametrize(
    "exc, fallback",
    [
        (QueueFull("queue full; raise CORRAL_QUEUE_MAX_DEPTH", model="a", knob="K", retry_after_s=1), True),
        (QueueTimeout("waited; raise CORRAL_QUEUE_TIMEOUT", model="a", knob="K", retry_after_s=1), True),
        (NoNodeAvailable("no node fits"), True),  # unschedulable
        (LoadModelFailed("LoadModel said no"), True),
        (ModelStillLoading("still loading", {}, 5), True),
        (timeout(), True),  # nothing sent yet: before the first byte
        (refused("UNAVAILABLE"), True),
        (refused("INVALID_ARGUMENT"), False),  # the request is wrong: another model would refuse it too
        (refused("OUT_OF_RANGE"), False),  # too long for the context
    ],
)
async def test_no_capacity_and_failures_before_the_first_byte_go_to_the_next_target(
    exc: Exception, fallback: bool
) -> None:
    assert worth_a_fallback(await mapped(exc)) is fallback


def test_a_target_gone_is_skipped_and_a_bad_request_is_not() -> None:
    assert worth_a_fallback(APIError(404, "model 'x' not found", "invalid_request_error", "model_not_found"))
    assert not worth_a_fallback(APIError(400, "bad field", "invalid_request_error", "invalid_value"))


def _state(routes: dict[str, ModelRoute], rand: Callable[[], float] = lambda: 0.0) -> FrontendState:
    return FrontendState(  # the route path reads configs, aliases and routes only
        pool=cast(Any, None),
        nc=cast(Any, None),
        router=NO_ROUTER,
        configs={"a": CFG, "b": CFG, "c": CFG},
        registration_token="",
        auto_approve_nodes=False,
        aliases={"b-alias": "b"},
        routes=RouteTable(routes, rand=rand),
    )


def _handler(failures: dict[str, Exception]) -> Any:
    tried: list[str] = []

    async def handle(model: str) -> Response:  # the request, served by one model
        tried.append(model)
        if model in failures:
            raise await mapped(failures[model])
        return Response(model)

    handle.tried = tried  # type: ignore[attr-defined]
    return handle


async def test_the_fallback_serves_and_the_headers_name_the_route_and_the_target() -> None:
    state = _state({"r": ModelRoute("r", (RouteTarget("a", 1),), ("b-alias", "c"))})
    handler = _handler({"a": NoNodeAvailable("no node fits")})
    response = await serve_route(state, "r", ["a", "b-alias", "c"], handler)
    assert handler.tried == ["a", "b-alias"]
    assert response.headers["x-corral-route"] == "r"
    assert response.headers["x-corral-route-target"] == "b"  # the model behind the alias


async def test_a_bad_request_is_answered_at_once_with_the_route_named() -> None:
    state = _state({})
    handler = _handler({"a": refused("INVALID_ARGUMENT")})
    with pytest.raises(APIError) as raised:
        await serve_route(state, "r", ["a", "b"], handler)
    assert handler.tried == ["a"]
    assert raised.value.status == 400
    assert raised.value.headers["x-corral-route-target"] == "a"


async def test_when_no_target_can_serve_the_error_names_each_attempt() -> None:
    state = _state({})
    handler = _handler({"a": NoNodeAvailable("no node fits"), "b": timeout()})
    with pytest.raises(APIError) as raised:
        await serve_route(state, "r", ["a", "b"], handler)
    error = raised.value
    assert (error.status, error.code, error.param) == (504, "backend_timeout", "model")
    assert error.message == "route 'r': no target could serve the request; tried a: no node fits; b: no reply"
    assert [(a["model"], a["status"]) for a in error.extra["attempts"]] == [("a", 503), ("b", 504)]
    assert error.headers["x-corral-route"] == "r"


def test_route_target_picks_for_a_route_and_leaves_models_and_aliases() -> None:
    routes = {
        "r": ModelRoute("r", (RouteTarget("a", 1), RouteTarget("c", 1))),
        "b-alias": ModelRoute("b-alias", (RouteTarget("a", 1),)),  # an alias took the name later: it wins
    }
    state = _state(routes, rand=lambda: 0.9)
    assert route_target(state, "r") == "c"
    assert route_target(state, "a") == "a"
    assert route_target(state, "b-alias") == "b-alias"
