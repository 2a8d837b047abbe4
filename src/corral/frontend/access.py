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

A key carries its policy (tenancy/policy.py), read by the same lookup and kept in the same cache, so a policy
change drops the key from every frontend's cache as a revocation does. A request with a valid key runs as the
key's caller (`tenancy.caller.CURRENT`: tenant, key id, priority class; `x-corral-priority` may lower the class,
an unknown class is a 400) with the key's policy beside it (`tenancy.policy.CURRENT_POLICY`: the inference
handlers check the model against it). On the inference routes a key with rate limits or quotas is checked here
(tenancy/limits.py: 429 rate_limit_exceeded or insufficient_quota) and its responses get the x-ratelimit-*
headers; a key without any pays one attribute test. With auth off requests are not asked for a key and run as
the anonymous caller, whatever key they carry.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import asyncpg

from corral.frontend.auth_throttle import AuthThrottle
from corral.frontend.sources import source_of
from corral.store import api_keys
from corral.telemetry.families import API_KEY_LOOKUPS, AUTH_FAILURES
from corral.tenancy.caller import ANONYMOUS, CURRENT, PRIORITY_CLASSES, PRIORITY_HEADER, PRIORITY_RANK, Caller
from corral.tenancy.limits import Limits
from corral.tenancy.policy import CURRENT_POLICY, KeyPolicy, policy_of

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
    "/api/traffic",
    "/api/gallery",  # issue 26: the model gallery (its reference routes below)
    "/models/apply",
    "/models/jobs",
    "/models/galleries",
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


@dataclass(frozen=True, slots=True)
class KeyAccess:
    """What one valid key may do: its role, its policy (tenancy/policy.py) and the caller its requests run as."""

    role: str
    policy: KeyPolicy
    caller: Caller

    @classmethod
    def of(cls, row: Any) -> KeyAccess:
        policy = policy_of(row)
        return cls(str(row["role"]), policy, policy.caller())


class KeyCache:
    """sha256(key) → role and policy: valid keys (fresh for POSITIVE_TTL_S, known good until revoked or their
    policy is changed) and wrong ones (for NEGATIVE_TTL_S), each table bounded, the oldest entry evicted first."""

    def __init__(self, pool: asyncpg.Pool, clock: Callable[[], float] = time.monotonic) -> None:
        self.pool, self._clock = pool, clock
        self._good: dict[str, tuple[KeyAccess, float]] = {}  # hash → (access, fresh until)
        self._wrong: dict[str, float] = {}  # hash → known wrong until
        self.lookups = 0

    def good(self, hashed: str) -> tuple[KeyAccess, bool] | None:
        """(access, still fresh) of a key seen valid and not revoked since; None for any other."""
        entry = self._good.get(hashed)
        return None if entry is None else (entry[0], entry[1] > self._clock())

    def known_wrong(self, hashed: str) -> bool:
        until = self._wrong.get(hashed)
        return until is not None and until > self._clock()

    async def lookup(self, hashed: str) -> KeyAccess | None:
        """The key's role and policy from PostgreSQL (None: unknown or revoked), remembered."""
        self.lookups += 1
        API_KEY_LOOKUPS.inc()
        row = await api_keys.access_of(self.pool, hashed)
        now = self._clock()
        if row is None:
            self._good.pop(hashed, None)
            _remember(self._wrong, hashed, now + NEGATIVE_TTL_S)
            return None
        access = KeyAccess.of(row)
        self._wrong.pop(hashed, None)
        _remember(self._good, hashed, (access, now + POSITIVE_TTL_S))
        return access

    def evict(self, hashed: str) -> None:
        """A key revoked or its policy changed (on any frontend): looked up again at its next request."""
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
_limited_path = _Under(USER_PREFIXES)  # keys' rate limits and quotas count inference requests only


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
    *,
    challenge: bool = True,
) -> None:
    """`challenge`: an authentication error (it names the Bearer scheme)."""
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *([(b"www-authenticate", b"Bearer")] if challenge else []),
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


def _priority_error(asked: bytes) -> dict[str, Any]:
    shown = asked.decode("latin-1")[:32]
    message = (
        f"header {PRIORITY_HEADER.decode()}: unknown priority class {shown!r}; one of "
        f"{', '.join(PRIORITY_CLASSES)} (a key's class is its ceiling: a request may only lower it)"
    )
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "code": "invalid_value",
            "param": PRIORITY_HEADER.decode(),
        }
    }


def _asked_priority(scope: Scope) -> bytes | None:
    for name, value in scope.get("headers", ()):
        if name == PRIORITY_HEADER:
            return bytes(value)
    return None


Refusal = tuple[int, dict[str, Any]]


class KeyLookup(Protocol):
    """What `AccessControl` asks of its key cache: `KeyCache` (a unit test's stand-in has these three too; typed as
    a protocol, the compiled module (corral/native.py) does not insist on the class)."""

    def good(self, hashed: str) -> tuple[KeyAccess, bool] | None: ...
    def known_wrong(self, hashed: str) -> bool: ...
    async def lookup(self, hashed: str) -> KeyAccess | None: ...


class AccessControl:
    """`limits`: the rate limits and quotas of keys that carry them (tenancy/limits.py), checked on the
    inference routes; None: keys' limits are not checked (an app built without the frontend's parts)."""

    def __init__(
        self,
        app: ASGIApp,
        cache: KeyLookup,
        *,
        user_auth: bool,
        metrics_token: str = "",
        throttle: AuthThrottle | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.app, self.cache, self.user_auth, self.limits = app, cache, user_auth, limits
        self.metrics_token = metrics_token.encode()
        self.throttle = throttle or AuthThrottle(20, 60.0)

    async def __call__(
        self, scope: Scope, receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]
    ) -> None:
        if scope["type"] == "http":
            try:
                refusal, access = await self._refusal(scope, scope["path"])
            except Throttled as exc:
                await _send_json(
                    send,
                    429,
                    _throttled_error(scope["path"], exc),
                    ((b"retry-after", str(exc.retry_after_s).encode()),),
                )
                return
            # (`error`, not `exc` again: compiled (corral/native.py), one name keeps its first clause's type)
            except Exception as error:  # a key lookup with PostgreSQL down: 503 naming it, never a traceback
                from corral.frontend.errors import dependency_or_unexpected_response

                await dependency_or_unexpected_response(error)(scope, receive, send)
                return
            if refusal is not None:
                await _send_json(send, refusal[0], refusal[1])
                return
            await self._as_caller(scope, receive, send, access)
            return
        if scope["type"] == "websocket":
            try:
                refusal, _access = await self._refusal(scope, scope["path"])
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

    def direct_access(self, scope: Scope) -> tuple[KeyAccess | None] | None:
        """For the inference fast path's common case (frontend/direct_path.py), decided from memory with no side
        effect: `(None,)` when the route needs no key (auth off), `(access,)` for a fresh good key without rate
        limits or quotas; None for everything else (no key, a key to look up or refuse, a metered key, a priority
        header), which takes this layer's full path and its answers."""
        path = scope["path"]
        if _asked_priority(scope) is not None or _admin_path(path) or path == METRICS_PATH:
            return None
        if not self.user_auth or path in OPEN_PATHS or _own_guard_path(path):
            return (None,)
        key = bearer(scope)
        good = self.cache.good(api_keys.key_hash(key)) if key else None
        if good is None or not good[1]:
            return None
        access = good[0]
        if access.policy is not None and access.policy.metered and self.limits is not None:
            return None
        return (access,)

    async def _as_caller(
        self,
        scope: Scope,
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
        access: KeyAccess | None,
    ) -> None:
        """Serve the request as its key's caller (tenancy/caller.py `CURRENT`, with the key's policy), lowered
        by `x-corral-priority`; within the key's rate limits and quotas on the inference routes."""
        asked = _asked_priority(scope)
        if access is None and asked is None:
            await self.app(scope, receive, send)  # auth off, or a route without a key: ANONYMOUS
            return
        caller = ANONYMOUS if access is None else access.caller
        if asked is not None:
            if asked.decode("latin-1") not in PRIORITY_RANK:
                await _send_json(send, 400, _priority_error(asked), challenge=False)
                return
            caller = caller.lowered_to(asked.decode("latin-1"))
        policy = None if access is None else access.policy
        if policy is not None and policy.metered and self.limits is not None and _limited_path(scope["path"]):
            limit_refusal, headers = self.limits.admit(policy)
            if limit_refusal is not None:
                await _send_json(send, 429, limit_refusal.body, limit_refusal.headers, challenge=False)
                return
            if headers:
                send = _with_headers(send, headers)
        caller_token, policy_token = CURRENT.set(caller), CURRENT_POLICY.set(policy)
        try:
            await self.app(scope, receive, send)
        finally:
            CURRENT.reset(caller_token)
            CURRENT_POLICY.reset(policy_token)

    async def _refusal(self, scope: Scope, path: str) -> tuple[Refusal | None, KeyAccess | None]:
        """(why the request is refused, or None; the access of the valid key it carries, None without one)."""
        if _admin_path(path):
            admin, access = await self._admin_refusal(scope)
            return (None if admin is None else (admin[0], _admin_error(*admin))), access
        if path == METRICS_PATH and (self.user_auth or self.metrics_token):
            message, access = await self._metrics_refusal(scope)
            return (None if message is None else (401, _user_error(message))), access
        if self.user_auth and path not in OPEN_PATHS and not _own_guard_path(path):
            message, access = await self._user_refusal(scope)
            return (None if message is None else (401, _user_error(message))), access
        return None, None

    async def _admin_refusal(self, scope: Scope) -> tuple[tuple[int, str] | None, KeyAccess | None]:
        key = bearer(scope)
        if not key:
            return (401, "admin API key required: send Authorization: Bearer <admin key>"), None
        access = await self._access(scope, key)
        if access is None:
            return (401, "invalid or revoked API key"), None
        if access.role != api_keys.ADMIN:
            return (403, "this API key is not an admin key"), None
        return None, access

    async def _user_refusal(self, scope: Scope) -> tuple[str | None, KeyAccess | None]:
        key = bearer(scope)
        if not key:
            return "API key required: send Authorization: Bearer <key> (auth is enabled: LOCALAI_AUTH)", None
        access = await self._access(scope, key)
        return ("invalid or revoked API key" if access is None else None), access

    async def _metrics_refusal(self, scope: Scope) -> tuple[str | None, KeyAccess | None]:
        key = bearer(scope)
        if not key:
            return (
                "metrics need the scrape token (CORRAL_METRICS_TOKEN) or an API key: "
                "send Authorization: Bearer <token>"
            ), None
        if self.metrics_token and hmac.compare_digest(key.encode(), self.metrics_token):
            return None, None
        access = await self._access(scope, key)
        return ("invalid scrape token or API key" if access is None else None), access

    async def _access(self, scope: Scope, key: str) -> KeyAccess | None:
        """The key's role and policy, None for a wrong key; raises Throttled when its source is past its failure
        limit. A known-good key is never throttled; a known-wrong one is answered from memory (no guess, no
        lookup)."""
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
            access = await self.cache.lookup(hashed)
        except BaseException:
            self.throttle.refund(source)  # PostgreSQL down is not the client's guess
            raise
        if access is not None:
            self.throttle.refund(source)
            return access
        AUTH_FAILURES.labels("unknown").inc()
        delay_s = self.throttle.delay_s(source)
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        return None


def _with_headers(
    send: Callable[[Any], Awaitable[None]], headers: tuple[tuple[bytes, bytes], ...]
) -> Callable[[Any], Awaitable[None]]:
    """`send` adding `headers` to the response's start (a limited key's x-ratelimit-*)."""

    async def sending(message: Any) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *headers]}
        await send(message)

    return sending
