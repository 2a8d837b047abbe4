"""Bearer-token auth of backend gRPC calls: which metadata carries the token, and what a refused call gets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import grpc
import pytest

from corral.backends import auth
from corral.backends.auth import AUTH_TOKEN_ENV, BearerAuthInterceptor, _presented_token, auth_token_from_env


@dataclass(frozen=True)
class Details:
    method: str
    invocation_metadata: Sequence[tuple[str, str | bytes]] | None


async def _unary(request: object, context: object) -> str:
    return "served"


HANDLER = grpc.unary_unary_rpc_method_handler(_unary)


async def intercept(metadata: Sequence[tuple[str, str | bytes]] | None, handler: object = HANDLER) -> object:
    async def continuation(details: object) -> object:
        return handler

    return await BearerAuthInterceptor("s3cret").intercept_service(
        continuation, Details("/backend/Predict", metadata)
    )


@pytest.mark.parametrize(
    ("metadata", "token"),
    [
        ([("authorization", "Bearer s3cret")], "s3cret"),
        ([("Authorization", "bearer s3cret ")], "s3cret"),  # scheme and key case-insensitive, value trimmed
        ([("x-other", "1"), ("authorization", "BEARER  s3cret")], "s3cret"),
        ([("authorization", "Basic czNjcmV0")], ""),
        ([("authorization", b"Bearer s3cret")], ""),  # binary metadata is not a token
        ([("authorization", "Bearer")], ""),
        ([], ""),
        (None, ""),
    ],
)
def test_the_presented_token_is_the_bearer_value(
    metadata: Sequence[tuple[str, str | bytes]] | None, token: str
) -> None:
    assert _presented_token(metadata) == token


def test_the_first_authorization_entry_that_is_a_bearer_counts() -> None:
    assert _presented_token([("authorization", "Basic x"), ("authorization", "Bearer two")]) == "two"


def test_the_token_comes_from_the_environment_and_empty_means_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(AUTH_TOKEN_ENV, raising=False)
    assert auth_token_from_env() is None
    monkeypatch.setenv(AUTH_TOKEN_ENV, "")
    assert auth_token_from_env() is None
    monkeypatch.setenv(AUTH_TOKEN_ENV, "tok")
    assert auth_token_from_env() == "tok"


def test_an_interceptor_needs_a_token() -> None:
    with pytest.raises(ValueError, match="non-empty token"):
        BearerAuthInterceptor("")


async def test_the_right_token_reaches_the_servicer_unchanged() -> None:
    assert await intercept([("authorization", "Bearer s3cret")]) is HANDLER


@pytest.mark.parametrize(
    ("metadata", "detail"),
    [
        (None, "missing bearer token: send metadata 'authorization: Bearer <token>'"),
        ([("authorization", "Bearer wrong")], "invalid bearer token"),
        ([("authorization", "Bearer s3cret-and-more")], "invalid bearer token"),
        (
            [("authorization", "Bearer s3cré")],
            "invalid bearer token",
        ),  # non-ASCII compared as bytes, no error
    ],
)
async def test_a_wrong_or_missing_token_is_answered_by_a_denying_handler(
    metadata: Sequence[tuple[str, str | bytes]] | None, detail: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    real_deny = auth._deny

    def deny(handler: grpc.RpcMethodHandler, why: str) -> grpc.RpcMethodHandler:
        seen.append(why)
        return real_deny(handler, why)

    monkeypatch.setattr(auth, "_deny", deny)
    denied = await intercept(metadata)
    assert denied is not HANDLER and seen == [detail]


async def test_an_unknown_method_is_left_to_grpc() -> None:
    assert await intercept(None, handler=None) is None


@pytest.mark.parametrize(
    ("make", "request_streaming", "response_streaming"),
    [
        (grpc.unary_unary_rpc_method_handler, False, False),
        (grpc.unary_stream_rpc_method_handler, False, True),
        (grpc.stream_unary_rpc_method_handler, True, False),
        (grpc.stream_stream_rpc_method_handler, True, True),
    ],
)
def test_the_denying_handler_has_the_shape_and_codecs_of_the_real_one(
    make: object, request_streaming: bool, response_streaming: bool
) -> None:
    assert callable(make)
    real = make(_unary, request_deserializer=bytes, response_serializer=bytes)
    denied = auth._deny(real, "invalid bearer token")
    assert (denied.request_streaming, denied.response_streaming) == (request_streaming, response_streaming)
    assert (denied.request_deserializer, denied.response_serializer) == (bytes, bytes)
