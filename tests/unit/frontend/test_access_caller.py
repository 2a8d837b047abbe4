"""The access layer runs each request as its key's caller with the key's policy (tenancy/caller.py, policy.py),
lowered by x-corral-priority, and checks a limited key's rate on inference routes (tenancy/limits.py)."""

from __future__ import annotations

from typing import Any

import orjson

from corral.frontend.access import AccessControl, KeyAccess
from corral.store.api_keys import key_hash
from corral.tenancy.caller import ANONYMOUS, CURRENT, Caller
from corral.tenancy.limits import Limits
from corral.tenancy.policy import CURRENT_POLICY, KeyPolicy

POLICY = KeyPolicy("k1", "team-a", "tenant-a", models=("llama-*",), rpm=1, priority="high")


class _OneKeyCache:
    def __init__(self) -> None:
        self.access = KeyAccess("user", POLICY, POLICY.caller())

    def good(self, hashed: str) -> tuple[KeyAccess, bool] | None:
        return (self.access, True) if hashed == key_hash("corral-good") else None

    def known_wrong(self, hashed: str) -> bool:
        return False

    async def lookup(self, hashed: str) -> KeyAccess | None:
        return None


async def _call(
    access: AccessControl, path: str, headers: list[tuple[bytes, bytes]]
) -> tuple[int, dict[bytes, bytes], Any, list[tuple[Caller, KeyPolicy | None]]]:
    sent: list[dict[str, Any]] = []
    seen: list[tuple[Caller, KeyPolicy | None]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def inner(scope: Any, receive: Any, send_: Any) -> None:
        seen.append((CURRENT.get(), CURRENT_POLICY.get()))
        await send_({"type": "http.response.start", "status": 200, "headers": []})
        await send_({"type": "http.response.body", "body": b"{}"})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    access.app = inner
    scope = {"type": "http", "path": path, "method": "GET", "headers": headers, "client": ("192.0.2.1", 1)}
    await access(scope, receive, send)
    return sent[0]["status"], dict(sent[0]["headers"]), orjson.loads(sent[1]["body"]), seen


KEY = [(b"authorization", b"Bearer corral-good")]


async def test_a_keyed_request_runs_as_its_key_with_its_policy_and_the_context_is_reset_after() -> None:
    access = AccessControl(lambda *_: None, _OneKeyCache(), user_auth=True)  # type: ignore[arg-type]
    status, _headers, _body, seen = await _call(access, "/v1/models", KEY)
    assert status == 200 and seen == [(Caller("tenant-a", "k1", "high"), POLICY)]
    assert CURRENT.get() is ANONYMOUS and CURRENT_POLICY.get() is None
    *_, seen = await _call(access, "/v1/models", [*KEY, (b"x-corral-priority", b"batch")])
    assert seen[0][0].priority == "batch"
    *_, seen = await _call(access, "/v1/models", [*KEY, (b"x-corral-priority", b"critical")])
    assert seen[0][0].priority == "high"  # the key's class is its ceiling


async def test_an_unknown_priority_class_is_a_400_naming_the_header_and_the_classes() -> None:
    access = AccessControl(lambda *_: None, _OneKeyCache(), user_auth=False)  # type: ignore[arg-type]
    status, _headers, body, seen = await _call(access, "/v1/models", [(b"x-corral-priority", b"urgent")])
    assert status == 400 and seen == []
    assert body["error"]["param"] == "x-corral-priority"
    assert (
        "unknown priority class 'urgent'; one of critical, high, normal, low, batch"
        in body["error"]["message"]
    )


async def test_without_auth_a_request_runs_anonymous_whatever_key_it_carries() -> None:
    access = AccessControl(lambda *_: None, _OneKeyCache(), user_auth=False)  # type: ignore[arg-type]
    *_, seen = await _call(access, "/v1/models", KEY)
    assert seen == [(ANONYMOUS, None)]


async def test_a_limited_key_gets_the_headers_then_429_on_inference_routes_only() -> None:
    access = AccessControl(
        lambda *_: None,  # type: ignore[arg-type]
        _OneKeyCache(),
        user_auth=True,
        limits=Limits(),
    )
    status, headers, _body, _seen = await _call(access, "/v1/models", KEY)
    assert status == 200 and headers[b"x-ratelimit-remaining-requests"] == b"0"
    status, headers, body, seen = await _call(access, "/v1/models", KEY)
    assert status == 429 and seen == [] and body["error"]["code"] == "rate_limit_exceeded"
    assert b"www-authenticate" not in headers and int(headers[b"retry-after"]) >= 1
    status, headers, _body, _seen = await _call(access, "/healthz", KEY)  # not an inference route
    assert status == 200 and b"x-ratelimit-limit-requests" not in headers
