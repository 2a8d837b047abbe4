"""The registration-token check of the worker-facing /api/node/* routes."""

from __future__ import annotations

import orjson
import pytest
from starlette.requests import Request

from corral.frontend.node_api.token import check_registration_token


def request(authorization: bytes | None) -> Request:
    headers = [] if authorization is None else [(b"authorization", authorization)]
    return Request({"type": "http", "method": "POST", "path": "/api/node/register", "headers": headers})


def error_of(authorization: bytes | None, token: str = "reg-token") -> tuple[int, object] | None:
    answer = check_registration_token(request(authorization), token)
    return None if answer is None else (answer.status_code, orjson.loads(bytes(answer.body))["error"])


def test_without_a_configured_token_every_request_is_allowed() -> None:
    assert error_of(None, token="") is None
    assert error_of(b"Bearer anything", token="") is None


def test_the_configured_token_is_allowed() -> None:
    assert error_of(b"Bearer reg-token") is None


@pytest.mark.parametrize(
    "header", [None, b"", b"reg-token", b"bearer reg-token", b"Basic cmVnLXRva2Vu", b"Bearer"]
)
def test_a_missing_or_malformed_header_is_a_401_saying_so(header: bytes | None) -> None:
    assert error_of(header) == (401, "missing or invalid Authorization header")


@pytest.mark.parametrize(
    "header", [b"Bearer wrong", b"Bearer reg-token ", b"Bearer reg-toke", b"Bearer ", b"Bearer \xff\xfe"]
)
def test_a_wrong_token_is_a_401_naming_the_registration_token(header: bytes) -> None:
    assert error_of(header) == (401, "invalid registration token")
