"""Which errors mean "a dependency is down" (503 naming it and its setting) and which do not (500)."""

from __future__ import annotations

import json

import asyncpg
import nats.errors
import pytest

from corral.frontend.unavailable import (
    DATABASE,
    MESSAGE_BUS,
    unavailable_dependency,
    unavailable_response,
)


@pytest.mark.parametrize(
    "exc, found",
    [
        (asyncpg.exceptions.CannotConnectNowError("the database system is starting up"), DATABASE),
        (asyncpg.exceptions.AdminShutdownError("terminating connection"), DATABASE),
        (asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed"), DATABASE),
        (asyncpg.InterfaceError("pool is closing"), DATABASE),
        (nats.errors.ConnectionClosedError(), MESSAGE_BUS),
        (nats.errors.OutboundBufferLimitError(), MESSAGE_BUS),
        (ConnectionRefusedError(111, "refused"), None),  # not raised inside asyncpg: not the database
        (FileNotFoundError("x"), None),
        (asyncpg.exceptions.UniqueViolationError("duplicate key"), None),  # the database answered
        (ValueError("bug"), None),
    ],
)
def test_only_errors_of_an_unreachable_dependency_are_classified_as_down(
    exc: Exception, found: object
) -> None:
    assert unavailable_dependency(exc) == found


def test_the_503_names_the_dependency_and_its_setting_and_asks_to_retry() -> None:
    response = unavailable_response(nats.errors.ConnectionClosedError())
    assert response is not None and response.status_code == 503 and response.headers["Retry-After"] == "5"
    assert json.loads(bytes(response.body)) == {
        "error": {
            "message": "message bus unavailable: NATS: connection closed (LOCALAI_NATS_URL / --nats-url); retry shortly",
            "type": "service_unavailable",
            "code": 503,
        }
    }
