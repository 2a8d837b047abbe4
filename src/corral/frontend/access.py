"""Who may call what: admin keys on `/api/nodes`, `/api/settings`, `/api/keys`, `/api/model-configs`,
`/api/resources`, `/api/backends`, `/api/operations`, `/api/events` and the `/ws/nodes` WebSockets, always. With auth
enabled (LOCALAI_AUTH) every other route needs a user or admin key too — models, load status, variants, `/docs`, `/openapi.json` — except the health checks
(`/healthz`, `/readyz`), the web UI's static pages (`/app`, whose API calls carry the admin key) and
`/api/node/*` (worker self-service: registration token plus the node's
own credential, see `node_identity`). `/metrics` takes an API key or the scrape token
(CORRAL_METRICS_TOKEN); it needs one of them whenever auth is on or a scrape token is set.

A pure ASGI middleware, not a per-route dependency: the inference path pays one prefix test
when auth is off, and one sha256 plus a dict lookup when it is on. Key hashes are cached in
memory (positive 10 s, negative 2 s) and evicted at once when any frontend revokes a key
(NATS `state.api-keys.revoked`), so there is no database statement per request.
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from corral.store import api_keys

log = logging.getLogger(__name__)

ADMIN_PREFIXES = ("/api/nodes", "/api/settings", "/api/keys", "/api/model-configs", "/api/resources",
                  "/api/agent-jobs", "/api/backends", "/api/operations", "/ws/nodes", "/api/events")
USER_PREFIXES = ("/v1/",)
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/"})
UI_PREFIXES = ("/app",)  # the web UI's static pages: no data; their API calls carry the admin key
WORKER_PREFIXES = ("/api/node",)  # guarded by node_api: registration token and the node's own credential
METRICS_PATH = "/metrics"
POSITIVE_TTL_S = 10.0
NEGATIVE_TTL_S = 2.0
CACHE_MAX_ENTRIES = 10_000

Scope = dict[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


class KeyCache:
    """sha256(key) → role (or None for unknown/revoked), with a short TTL."""

    def __init__(self, pool: asyncpg.Pool, clock: Callable[[], float] = time.monotonic) -> None:
        self.pool, self._clock = pool, clock
        self._entries: dict[str, tuple[str | None, float]] = {}
        self.lookups = 0

    async def role(self, key: str) -> str | None:
        hashed = api_keys.key_hash(key)
        entry = self._entries.get(hashed)
        now = self._clock()
        if entry is not None and entry[1] > now:
            return entry[0]
        self.lookups += 1
        role = await api_keys.role_of(self.pool, hashed)
        if len(self._entries) >= CACHE_MAX_ENTRIES:
            self._entries.clear()  # a flood of random keys must not grow memory without bound
        self._entries[hashed] = (role, now + (POSITIVE_TTL_S if role else NEGATIVE_TTL_S))
        return role

    def evict(self, hashed: str) -> None:
        self._entries.pop(hashed, None)


def _under(path: str, prefixes: tuple[str, ...]) -> bool:
    for prefix in prefixes:
        if path == prefix or path.startswith(prefix if prefix.endswith("/") else prefix + "/"):
            return True
    return False


def bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            text = value.decode("latin-1")
            return text[7:].strip() if text[:7].lower() == "bearer " else None
    return None


async def _send_json(send: Callable[[Any], Awaitable[None]], status: int, body: dict[str, Any]) -> None:
    payload = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                            (b"www-authenticate", b"Bearer")]})
    await send({"type": "http.response.body", "body": payload})


def _admin_error(status: int, message: str) -> dict[str, Any]:
    return {"error": {"code": status, "message": message, "type": "auth_error"}}


def _user_error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "code": "invalid_api_key"}}


class AccessControl:
    def __init__(self, app: ASGIApp, cache: KeyCache, *, user_auth: bool, metrics_token: str = "") -> None:
        self.app, self.cache, self.user_auth = app, cache, user_auth
        self.metrics_token = metrics_token.encode()

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Any]],
                       send: Callable[[Any], Awaitable[None]]) -> None:
        if scope["type"] == "http":
            refusal = await self._refusal(scope, scope["path"])
            if refusal is not None:
                await _send_json(send, refusal[0], refusal[1])
                return
        elif scope["type"] == "websocket":
            refusal = await self._refusal(scope, scope["path"])
            if refusal is not None:  # closed before accept: the client sees HTTP 403
                await send({"type": "websocket.close", "code": 1008,
                            "reason": str(refusal[1]["error"]["message"])[:120]})
                return
        await self.app(scope, receive, send)

    async def _refusal(self, scope: Scope, path: str) -> tuple[int, dict[str, Any]] | None:
        if _under(path, ADMIN_PREFIXES):
            admin = await self._admin_refusal(scope)
            return None if admin is None else (admin[0], _admin_error(*admin))
        if path == METRICS_PATH and (self.user_auth or self.metrics_token):
            message = await self._metrics_refusal(scope)
            return None if message is None else (401, _user_error(message))
        if self.user_auth and path not in OPEN_PATHS and not _under(path, WORKER_PREFIXES + UI_PREFIXES):
            message = await self._user_refusal(scope)
            return None if message is None else (401, _user_error(message))
        return None

    async def _admin_refusal(self, scope: Scope) -> tuple[int, str] | None:
        key = bearer(scope)
        if not key:
            return 401, "admin API key required: send Authorization: Bearer <admin key>"
        role = await self.cache.role(key)
        if role is None:
            return 401, "invalid or revoked API key"
        if role != api_keys.ADMIN:
            return 403, "this API key is not an admin key"
        return None

    async def _user_refusal(self, scope: Scope) -> str | None:
        key = bearer(scope)
        if not key:
            return "API key required: send Authorization: Bearer <key> (auth is enabled: LOCALAI_AUTH)"
        if await self.cache.role(key) is None:
            return "invalid or revoked API key"
        return None

    async def _metrics_refusal(self, scope: Scope) -> str | None:
        key = bearer(scope)
        if not key:
            return ("metrics need the scrape token (CORRAL_METRICS_TOKEN) or an API key: "
                    "send Authorization: Bearer <token>")
        if self.metrics_token and hmac.compare_digest(key.encode(), self.metrics_token):
            return None
        if await self.cache.role(key) is None:
            return "invalid scrape token or API key"
        return None
