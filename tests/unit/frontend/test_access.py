"""The access layer sits outside the FastAPI app, so it answers its own dependency errors."""

from __future__ import annotations

from typing import Any

import asyncpg
import orjson

from corral.frontend.access import AccessControl, KeyAccess
from corral.tenancy.policy import KeyPolicy


class _DownCache:
    def good(self, hashed: str) -> None:
        return None

    def known_wrong(self, hashed: str) -> bool:
        return False

    async def lookup(self, hashed: str) -> KeyAccess | None:
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

    access = AccessControl(inner, _DownCache(), user_auth=True)
    scope = {
        "type": "http",
        "path": "/v1/chat/completions",
        "method": "POST",
        "headers": [(b"authorization", b"Bearer some-key")],
    }
    await access(scope, receive, send)
    assert reached == []
    assert sent[0]["status"] == 503
    message = orjson.loads(sent[1]["body"])["error"]["message"]
    assert "PostgreSQL" in message


ADMIN_ACCESS = KeyAccess("admin", KeyPolicy("k1", "admin"), KeyPolicy("k1", "admin").caller())


class _CountingCache:
    """A key table in memory: one valid admin key; counts the lookups the access layer asks for."""

    def __init__(self, valid_hash: str) -> None:
        self.valid_hash, self.lookups, self.known = valid_hash, 0, False

    def good(self, hashed: str) -> tuple[KeyAccess, bool] | None:
        return (ADMIN_ACCESS, True) if self.known and hashed == self.valid_hash else None

    def known_wrong(self, hashed: str) -> bool:
        return False

    async def lookup(self, hashed: str) -> KeyAccess | None:
        self.lookups += 1
        if hashed == self.valid_hash:
            self.known = True
            return ADMIN_ACCESS
        return None


async def _admin_call(access: AccessControl, key: str, peer: str = "192.0.2.9") -> tuple[int, dict[str, str]]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def inner(scope: Any, receive: Any, send_: Any) -> None:
        await send_({"type": "http.response.start", "status": 200, "headers": []})

    access.app = inner
    scope = {
        "type": "http",
        "path": "/api/nodes",
        "method": "GET",
        "client": (peer, 40000),
        "headers": [(b"authorization", f"Bearer {key}".encode())],
    }
    await access(scope, None, send)  # type: ignore[arg-type]
    return sent[0]["status"], {k.decode(): v.decode() for k, v in sent[0]["headers"]}


async def test_unknown_keys_past_the_limit_get_429_with_retry_after_and_no_lookup_but_a_known_key_passes() -> (
    None
):
    from corral.frontend.auth_throttle import AuthThrottle
    from corral.store.api_keys import key_hash

    cache = _CountingCache(key_hash("corral-good"))
    access = AccessControl(
        None,  # type: ignore[arg-type]  # no app behind: only the admin call is made
        cache,  # a key table in memory
        user_auth=False,
        throttle=AuthThrottle(limit=2, window_s=60.0),
    )
    assert (await _admin_call(access, "corral-good"))[0] == 200  # seen valid once: known good from now on
    statuses = [(await _admin_call(access, f"corral-guess-{i}"))[0] for i in range(5)]
    status, headers = await _admin_call(access, "corral-guess-9")
    assert statuses == [401, 401, 429, 429, 429] and status == 429
    assert headers["retry-after"] == "60"
    assert cache.lookups == 3  # the good key once, then the two guesses the limit allows
    assert (await _admin_call(access, "corral-good"))[0] == 200  # someone else's failures do not lock it out
    assert (await _admin_call(access, "corral-guess-10", peer="192.0.2.10"))[0] == 401  # another source
