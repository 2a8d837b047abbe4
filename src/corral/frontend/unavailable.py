"""A dependency that is down (PostgreSQL, NATS) answers 503 naming it and the setting that points at it.

Never a 500: an operator reading the error learns what is down and where it is configured, a
client learns to retry (Retry-After). Warm requests never reach PostgreSQL, so they keep being
served meanwhile; only requests that need the database or the bus see this.
"""

from __future__ import annotations

import traceback

import asyncpg
import nats.errors
import orjson
from starlette.responses import Response

RETRY_AFTER_S = 5
DATABASE_SETTING = "LOCALAI_AUTH_DATABASE_URL / --database-url"
NATS_SETTING = "LOCALAI_NATS_URL / --nats-url"

_DATABASE_DOWN: tuple[type[BaseException], ...] = (
    asyncpg.exceptions.PostgresConnectionError,  # 08xxx: connection failure
    asyncpg.exceptions.OperatorInterventionError,  # 57xxx: shutting down, starting up, crash recovery
    asyncpg.exceptions.TooManyConnectionsError,
    asyncpg.exceptions.ConnectionDoesNotExistError,  # the server closed the connection mid-query
)
_NATS_DOWN: tuple[type[BaseException], ...] = (
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.NoServersError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.StaleConnectionError,
)

# What may signal a dependency that is down (the frontend's exception handlers are keyed by these).
DEPENDENCY_ERRORS: tuple[type[Exception], ...] = (
    OSError,
    TimeoutError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    nats.errors.Error,
)


def _raised_in(exc: BaseException, package: str) -> bool:
    return any(f"/{package}/" in frame.filename for frame in traceback.extract_tb(exc.__traceback__))


def _pool_closing(exc: BaseException) -> bool:
    return isinstance(exc, asyncpg.InterfaceError) and "pool is closing" in str(exc)


DATABASE = ("database", "PostgreSQL", DATABASE_SETTING)
MESSAGE_BUS = ("message bus", "NATS", NATS_SETTING)


def unavailable_dependency(exc: BaseException) -> tuple[str, str, str] | None:
    """(role, server, setting) when `exc` means PostgreSQL or NATS is unreachable, else None."""
    if isinstance(exc, _DATABASE_DOWN) or _pool_closing(exc):
        return DATABASE
    if isinstance(exc, OSError | TimeoutError) and _raised_in(exc, "asyncpg"):  # refused, reset, pool timeout
        return DATABASE
    if isinstance(exc, _NATS_DOWN):
        return MESSAGE_BUS
    return None


def unavailable_response(exc: BaseException) -> Response | None:
    """The 503 for a dependency that is down, or None when `exc` is something else."""
    found = unavailable_dependency(exc)
    if found is None:
        return None
    role, server, setting = found
    detail = (str(exc) or type(exc).__name__).removeprefix("nats: ")
    message = f"{role} unavailable: {server}: {detail} ({setting}); retry shortly"
    body = {"error": {"message": message, "type": "service_unavailable", "code": 503}}
    return Response(
        orjson.dumps(body),
        status_code=503,
        media_type="application/json",
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )
