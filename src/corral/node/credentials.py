"""The worker's NATS credentials: static (`LOCALAI_NATS_JWT` + `LOCALAI_NATS_USER_SEED`, used
as given), or minted by the frontend at registration and refreshed at ~75% of their lifetime
through `POST /api/node/<id>/nats-credentials`, which needs the node's own credential and
answers only for a live, approved node: a deleted node's JWT runs out (LOCALAI_NATS_WORKER_JWT_TTL)
and nats-server then refuses it. (A refresh is not a re-registration: that would drop the
node's replica rows.)

With `LOCALAI_NATS_REQUIRE_AUTH=true` and no static credentials, a worker that is still
pending approval registers again (with backoff) until it is approved and gets credentials,
and exits non-zero after a bounded number of attempts. A refresh that keeps failing ends the
worker (to restart and re-acquire) once the JWT has expired or after too many failures.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from corral.bus.natsauth import decode_claims
from corral.bus.security import NatsCredentials
from corral.config.errors import ConfigError
from corral.node.errors import CredentialsUnavailable, FrontendUnreachable
from corral.node.registration import backoff_s

log = logging.getLogger(__name__)

REFRESH_AT_FRACTION = 0.75
REFRESH_RETRY_MAX_S = 30.0
REFRESH_MAX_FAILURES = 100

Register = Callable[[], Awaitable[dict[str, Any]]]


class WorkerCredentials:
    def __init__(self, jwt: str = "", seed: str = "", *, static: bool = False) -> None:
        self.jwt, self.seed, self.static = jwt, seed, static

    @property
    def present(self) -> bool:
        return bool(self.jwt and self.seed)

    def for_connect(self) -> NatsCredentials | None:
        if not self.present:
            return None
        return NatsCredentials(jwt=lambda: self.jwt, seed=lambda: self.seed)

    def adopt(self, reply: dict[str, Any]) -> bool:
        """Take minted credentials from a register reply; True when new ones arrived."""
        if self.static or not (reply.get("nats_jwt") and reply.get("nats_user_seed")):
            return False
        self.jwt, self.seed = str(reply["nats_jwt"]), str(reply["nats_user_seed"])
        return True

    def lifetime_s(self) -> tuple[float, float] | None:
        """(issued at, expires at) of a minted JWT, None when it does not expire or is static."""
        if self.static or not self.jwt:
            return None
        claims = decode_claims(self.jwt)
        if not claims.get("exp"):
            return None
        return float(claims.get("iat") or time.time()), float(claims["exp"])


async def register_until_credentialed(
    register: Register,
    creds: WorkerCredentials,
    max_attempts: int,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> dict[str, Any]:
    """Register until the node is approved and credentials are minted (LOCALAI_NATS_REQUIRE_AUTH)."""
    last = "no answer"
    for attempt in range(1, max_attempts + 1):
        if attempt > 1:
            await sleep(backoff_s(attempt))
        try:
            reply = await register()
        except FrontendUnreachable as exc:
            last = str(exc)
            continue
        if reply.get("status") != "pending" and creds.adopt(reply):
            return reply
        last = f"node {reply.get('id')} is {reply.get('status')}" + (
            " and awaits approval (POST /api/nodes/<id>/approve)"
            if reply.get("status") == "pending"
            else " but the frontend minted no NATS credentials (set LOCALAI_NATS_ACCOUNT_SEED there)"
        )
        log.info("registration %d/%d: %s; retrying", attempt, max_attempts, last)
    raise CredentialsUnavailable(
        f"no NATS credentials after {max_attempts} registrations: {last}; the bus requires them "
        "(LOCALAI_NATS_REQUIRE_AUTH=true); raise CORRAL_REGISTER_MAX_ATTEMPTS to wait longer"
    )


class CredentialSettings(Protocol):
    """What a worker's or agent worker's settings say about its NATS credentials."""

    @property
    def nats_jwt(self) -> str: ...
    @property
    def nats_user_seed(self) -> str: ...
    @property
    def nats_require_auth(self) -> bool: ...
    @property
    def register_max_attempts(self) -> int: ...


async def first_registration(
    settings: CredentialSettings, creds: WorkerCredentials, register_once: Register, register: Register
) -> tuple[WorkerCredentials, dict[str, Any]]:
    """The first registration of a worker or agent worker, and the NATS credentials it connects with: static
    ones (LOCALAI_NATS_JWT with LOCALAI_NATS_USER_SEED), minted ones awaited until approval
    (LOCALAI_NATS_REQUIRE_AUTH: `register_once` until then), or those the reply of `register` carries."""
    if settings.nats_jwt or settings.nats_user_seed:
        if not (settings.nats_jwt and settings.nats_user_seed):
            raise ConfigError("LOCALAI_NATS_JWT and LOCALAI_NATS_USER_SEED must be set together")
        creds = WorkerCredentials(settings.nats_jwt, settings.nats_user_seed, static=True)
    elif settings.nats_require_auth:
        return creds, await register_until_credentialed(register_once, creds, settings.register_max_attempts)
    reply = await register()
    creds.adopt(reply)
    return creds, reply


async def refresh_loop(
    register: Register,
    creds: WorkerCredentials,
    on_new: Callable[[dict[str, Any]], Awaitable[None]],
    stop: asyncio.Event,
) -> None:
    """Fetch fresh credentials at 75% of the JWT lifetime; raise CredentialsUnavailable when refresh keeps failing."""
    while not stop.is_set():
        span = creds.lifetime_s()
        if span is None:
            return
        issued_s, expires_s = span
        wait_s = max(0.0, issued_s + REFRESH_AT_FRACTION * (expires_s - issued_s) - time.time())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), wait_s)
        if stop.is_set():
            return
        retry_s = min(REFRESH_RETRY_MAX_S, max(0.5, 0.05 * (expires_s - issued_s)))
        failures = 0
        while not stop.is_set():
            try:
                reply = await register()
                if creds.adopt(reply):
                    await on_new(reply)
                    log.info("NATS credentials refreshed")
                    break
                why = f"node is {reply.get('status')} and no credentials were minted"
            except Exception as exc:  # any failure counts; the bound below decides
                why = str(exc)
            failures += 1
            if failures >= REFRESH_MAX_FAILURES or time.time() >= expires_s:
                raise CredentialsUnavailable(
                    f"cannot refresh NATS credentials ({failures} attempts, JWT "
                    f"{'expired' if time.time() >= expires_s else 'expiring'}): {why}"
                )
            log.warning("NATS credential refresh failed (%d): %s; retrying in %.1fs", failures, why, retry_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), retry_s)
