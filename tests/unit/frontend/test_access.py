"""The access layer sits outside the FastAPI app, so it answers its own dependency errors."""

from __future__ import annotations

from typing import Any

import asyncpg
import orjson

from corral.frontend.access import AccessControl


class _DownCache:
    async def role(self, key: str) -> str | None:
        raise asyncpg.exceptions.PostgresConnectionError("connection refused")


async def test_a_key_lookup_with_postgresql_down_is_a_503_naming_it_not_a_traceback() -> None:
    reached: list[bool] = []
    sent: list[dict[str, Any]] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        reached.append(True)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    access = AccessControl(inner, _DownCache(), user_auth=True)  # type: ignore[arg-type]
    scope = {"type": "http", "path": "/v1/chat/completions", "method": "POST",
             "headers": [(b"authorization", b"Bearer some-key")]}
    await access(scope, receive, send)
    assert reached == []
    assert sent[0]["status"] == 503
    message = orjson.loads(sent[1]["body"])["error"]["message"]
    assert "PostgreSQL" in message
