"""Who may call what: admin keys on `/api/nodes`, `/api/settings`, `/api/keys`, `/api/model-configs`,
`/api/resources`, `/api/backends`, `/api/operations`, `/api/events` and the `/ws/nodes` WebSockets, always. With auth
enabled (LOCALAI_AUTH) every other route needs a user or admin key too — models, load status, variants, `/docs`, `/openapi.json` — except the health checks
(`/healthz`, `/readyz`), the web UI's static pages (`/app`, whose API calls carry the admin key) and
`/api/node/*` (worker self-service: registration token plus the node's
own credential, see `node_identity`). `/metrics` takes an API key or the scrape token
(CORRAL_METRICS_TOKEN); it needs one of them whenever auth is on or a scrape token is set.

A pure ASGI layer outside the FastAPI app (frontend/app.py), not a per-route dependency, so it
answers its own errors (a key lookup with PostgreSQL down: 503). The inference path pays one prefix test
when auth is off, and one sha256 plus a dict lookup when it is on. Key hashes are cached in
memory and evicted at once when any frontend revokes a key (NATS `state.api-keys.revoked`), so there is
no database statement per request: a valid key is looked up again after 10 s (and meanwhile stays known
good), a wrong one is answered from memory for 60 s. Any other key is a guess, bounded per source address
by the auth throttle (frontend/auth_throttle.py: delayed, then 429 with Retry-After, no lookup).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from corral.frontend.auth_throttle import AuthThrottle
from corral.frontend.sources import source_of
from corral.store import api_keys
from corral.telemetry.families import API_KEY_LOOKUPS, AUTH_FAILURES

log = logging.getLogger(__name__)

ADMIN_PREFIXES = (
    "/api/nodes",
    "/api/settings",
    "/api/keys",
    "/api/model-configs",
    "/api/resources",
    "/api/agent-jobs",
    "/api/backends",
    "/api/operations",
    "/ws/nodes",
    "/api/events",
    "/api/routes",
    "/api/usage",
)
USER_PREFIXES = ("/v1/", "/tts")  # inference: /tts is the reference's speech route
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/"})
UI_PREFIXES = ("/app",)  # the web UI's static pages: no data; their API calls carry the admin key
WORKER_PREFIXES = ("/api/node",)  # guarded by node_api: registration token and the node's own credential
METRICS_PATH = "/metrics"
POSITIVE_TTL_S = 10.0
NEGATIVE_TTL_S = (
    60.0  # keys are random and made here, so a wrong key does not turn valid (bootstrap keys aside)
)
CACHE_MAX_ENTRIES = 10_000  # per table (good, wrong): a flood of wrong keys never evicts a good one

Scope = dict[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


class KeyCache:
    """sha256(key) → role: valid keys (fresh for POSITIVE_TTL_S, known good until revoked) and wrong ones
    (for NEGATIVE_TTL_S), each table bounded, the oldest entry evicted first."""

    def __init__(self, pool: asyncpg.Pool, clock: Callable[[], float] = time.monotonic) -> None:
        self.pool, self._clock = pool, clock
        self._good: dict[str, tuple[str, float]] = {}  # hash → (role, fresh until)
        self._wrong: dict[str, float] = {}  # hash → known wrong until
        self.lookups = 0

    def good(self, hashed: str) -> tuple[str, bool] | None:
        """(role, still fresh) of a key seen valid and not revoked since; None for any other."""
        entry = self._good.get(hashed)
        return None if entry is None else (entry[0], entry[1] > self._clock())

    def known_wrong(self, hashed: str) -> bool:
        until = self._wrong.get(hashed)
        return until is not None and until > self._clock()

    async def lookup(self, hashed: str) -> str | None:
        """The key's role from PostgreSQL (None: unknown or revoked), remembered."""
        self.lookups += 1
        API_KEY_LOOKUPS.inc()
        role = await api_keys.role_of(self.pool, hashed)
        now = self._clock()
        if role is None:
            self._good.pop(hashed, None)
            _remember(self._wrong, hashed, now + NEGATIVE_TTL_S)
        else:
            self._wrong.pop(hashed, None)
            _remember(self._good, hashed, (role, now + POSITIVE_TTL_S))
        return role

    def evict(self, hashed: str) -> None:
        self._good.pop(hashed, None)
        self._wrong.pop(hashed, None)


def _remember(table: dict[str, Any], key: str, value: Any) -> None:
    table.pop(key, None)  # re-inserted last: the oldest entry is evicted first
    if len(table) >= CACHE_MAX_ENTRIES:
        del table[next(iter(table))]
    table[key] = value


class Throttled(Exception):
    """The source presented too many unknown keys in its window (auth_throttle.py)."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.message, self.retry_after_s = message, retry_after_s


class _Under:
    """Is a path one of `prefixes` or below one? Two C-level tests, not a loop (4 µs on every /v1 request)."""

    def __init__(self, prefixes: tuple[str, ...]) -> None:
        self.exact = frozenset(prefixes)
        self.below = tuple(p if p.endswith("/") else p + "/" for p in prefixes)

    def __call__(self, path: str) -> bool:
        return path in self.exact or path.startswith(self.below)


_admin_path = _Under(ADMIN_PREFIXES)
_own_guard_path = _Under(WORKER_PREFIXES + UI_PREFIXES)  # worker self-service and the web UI's pages


def bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            text = value.decode("latin-1")
            return text[7:].strip() if text[:7].lower() == "bearer " else None
    return None


async def _send_json(
    send: Callable[[Any], Awaitable[None]],
    status: int,
    body: dict[str, Any],
    headers: tuple[tuple[bytes, bytes], ...] = (),
) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                (b"www-authenticate", b"Bearer"),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


def _admin_error(status: int, message: str) -> dict[str, Any]:
    return {"error": {"code": status, "message": message, "type": "auth_error"}}


def _user_error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "code": "invalid_api_key"}}


def _throttled_error(path: str, exc: Throttled) -> dict[str, Any]:
    if _admin_path(path):
        return _admin_error(429, exc.message)
    return {"error": {"message": exc.message, "type": "rate_limit_error", "code": "too_many_auth_failures"}}


class AccessControl:
    def __init__(
        self,
        app: ASGIApp,
        cache: KeyCache,
        *,
        user_auth: bool,
        metrics_token: str = "",
        throttle: AuthThrottle | None = None,
    ) -> None:
        self.app, self.cache, self.user_auth = app, cache, user_auth
        self.metrics_token = metrics_token.encode()
        self.throttle = throttle or AuthThrottle(20, 60.0)

    async def __call__(
        self, scope: Scope, receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]
    ) -> None:
        if scope["type"] == "http":
            try:
                refusal = await self._refusal(scope, scope["path"])
            except Throttled as exc:
                await _send_json(
                    send,
                    429,
                    _throttled_error(scope["path"], exc),
                    ((b"retry-after", str(exc.retry_after_s).encode()),),
                )
                return
            except Exception as exc:  # a key lookup with PostgreSQL down: 503 naming it, never a traceback
                from corral.frontend.errors import dependency_or_unexpected_response

                await dependency_or_unexpected_response(exc)(scope, receive, send)
                return
            if refusal is not None:
                await _send_json(send, refusal[0], refusal[1])
                return
        elif scope["type"] == "websocket":
            try:
                refusal = await self._refusal(scope, scope["path"])
            except Throttled as exc:
                refusal = (429, _admin_error(429, exc.message))
            if refusal is not None:  # closed before accept: the client sees HTTP 403
                await send(
                    {
                        "type": "websocket.close",
                        "code": 1008,
                        "reason": str(refusal[1]["error"]["message"])[:120],
                    }
                )
                return
        await self.app(scope, receive, send)

    async def _refusal(self, scope: Scope, path: str) -> tuple[int, dict[str, Any]] | None:
        if _admin_path(path):
            admin = await self._admin_refusal(scope)
            return None if admin is None else (admin[0], _admin_error(*admin))
        if path == METRICS_PATH and (self.user_auth or self.metrics_token):
            message = await self._metrics_refusal(scope)
            return None if message is None else (401, _user_error(message))
        if self.user_auth and path not in OPEN_PATHS and not _own_guard_path(path):
            message = await self._user_refusal(scope)
            return None if message is None else (401, _user_error(message))
        return None

    async def _admin_refusal(self, scope: Scope) -> tuple[int, str] | None:
        key = bearer(scope)
        if not key:
            return 401, "admin API key required: send Authorization: Bearer <admin key>"
        role = await self._role(scope, key)
        if role is None:
            return 401, "invalid or revoked API key"
        if role != api_keys.ADMIN:
            return 403, "this API key is not an admin key"
        return None

    async def _user_refusal(self, scope: Scope) -> str | None:
        key = bearer(scope)
        if not key:
            return "API key required: send Authorization: Bearer <key> (auth is enabled: LOCALAI_AUTH)"
        if await self._role(scope, key) is None:
            return "invalid or revoked API key"
        return None

    async def _metrics_refusal(self, scope: Scope) -> str | None:
        key = bearer(scope)
        if not key:
            return (
                "metrics need the scrape token (CORRAL_METRICS_TOKEN) or an API key: "
                "send Authorization: Bearer <token>"
            )
        if self.metrics_token and hmac.compare_digest(key.encode(), self.metrics_token):
            return None
        if await self._role(scope, key) is None:
            return "invalid scrape token or API key"
        return None

    async def _role(self, scope: Scope, key: str) -> str | None:
        """The key's role, None for a wrong key; raises Throttled when its source is past its failure limit.
        A known-good key is never throttled; a known-wrong one is answered from memory (no guess, no lookup)."""
        hashed = api_keys.key_hash(key)
        good = self.cache.good(hashed)
        if good is not None:
            return good[0] if good[1] else await self.cache.lookup(hashed)
        if self.cache.known_wrong(hashed):
            AUTH_FAILURES.labels("known_wrong").inc()
            return None
        source = source_of(scope)
        wait_s = self.throttle.retry_after_s(source)
        if wait_s > 0:
            AUTH_FAILURES.labels("throttled").inc()
            raise Throttled(*self.throttle.refusal(wait_s))
        self.throttle.charge(source)
        try:
            role = await self.cache.lookup(hashed)
        except BaseException:
            self.throttle.refund(source)  # PostgreSQL down is not the client's guess
            raise
        if role is not None:
            self.throttle.refund(source)
            return role
        AUTH_FAILURES.labels("unknown").inc()
        delay_s = self.throttle.delay_s(source)
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        return None
