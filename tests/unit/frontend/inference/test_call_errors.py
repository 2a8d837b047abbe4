"""What a routed call raises → the status, type and code of the OpenAI error the client gets."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from corral.frontend.errors import APIError
from corral.frontend.inference.call_errors import http_errors
from corral.loading.errors import LoadDeadlineExceeded, LoadError, ModelStillLoading, NodeLost
from corral.models.config import ModelConfig
from corral.placement.errors import NoNodeAvailable
from corral.routing.errors import BackendCallError, BackendRefused, BackendTimeout
from corral.routing.router import Router

CFG = ModelConfig(name="llama", backend="simulator", model="m.gguf", models_dir=Path("/models"))
NO_ROUTER = cast(Router, SimpleNamespace(ctx=None))  # the placement re-check fails: the message alone stays


async def answer(exc: Exception, prompt_param: str | None = None) -> APIError:
    with pytest.raises(APIError) as raised:
        async with http_errors(NO_ROUTER, CFG, prompt_param):
            raise exc
    return raised.value


def refused(code: str) -> BackendRefused:
    return BackendRefused("backend: " + code, model="llama", node_name="n", code=code, details="")


async def test_nothing_raised_passes_through() -> None:
    async with http_errors(NO_ROUTER, CFG):
        pass


async def test_no_node_is_a_503_without_rejections_when_they_cannot_be_read() -> None:
    error = await answer(NoNodeAvailable("no healthy worker; start one"))
    assert (error.status, error.type, error.code, error.message) == (
        503,
        "server_error",
        "no_nodes_available",
        "no healthy worker; start one",
    )
    assert error.extra == {}


@pytest.mark.parametrize(
    "exc", [LoadError("worker said no"), LoadDeadlineExceeded("t"), NodeLost("gpu-1", "gone")]
)
async def test_a_failed_load_is_a_502(exc: LoadError) -> None:
    error = await answer(exc)
    assert (error.status, error.code, error.message) == (502, "model_load_failed", str(exc))


async def test_a_load_still_running_is_a_503_with_retry_after_and_progress() -> None:
    error = await answer(ModelStillLoading("still loading", {"state": "staging"}, 42))
    assert (error.status, error.type, error.code) == (503, "model_loading", "model_loading")
    assert error.headers == {"Retry-After": "42"} and error.extra == {"loading": {"state": "staging"}}


async def test_a_timeout_is_a_504_keeping_the_knob_in_the_message() -> None:
    exc = BackendTimeout(
        "no token in 30s; raise LOCALAI_X", model="m", node_name="n", budget_s=30, knob="X", dropped=False
    )
    error = await answer(exc)
    assert (error.status, error.code, error.message) == (
        504,
        "backend_timeout",
        "no token in 30s; raise LOCALAI_X",
    )


async def test_a_prompt_too_long_is_openais_context_length_exceeded_naming_the_field() -> None:
    error = await answer(refused("OUT_OF_RANGE"), "messages")
    assert (error.status, error.type, error.code, error.param) == (
        400,
        "invalid_request_error",
        "context_length_exceeded",
        "messages",
    )


async def test_an_invalid_argument_blames_the_request() -> None:
    error = await answer(refused("INVALID_ARGUMENT"), "messages")
    assert (error.status, error.code, error.param) == (400, "invalid_value", None)


@pytest.mark.parametrize("code", ["INTERNAL", "UNAVAILABLE", "", "RESOURCE_EXHAUSTED"])
async def test_other_backend_errors_are_a_502(code: str) -> None:
    error = await answer(refused(code))
    assert (error.status, error.type, error.code) == (502, "server_error", "backend_error")


async def test_errors_it_does_not_map_pass_through_unchanged() -> None:
    for exc in (BackendCallError("lost", model="m", node_name="n"), ValueError("bug")):
        with pytest.raises(type(exc)) as raised:
            async with http_errors(NO_ROUTER, CFG):
                raise exc
        assert raised.value is exc
