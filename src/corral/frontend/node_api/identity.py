"""A node's own credential (invariant 9: a node acts only as itself).

The first registration of a name issues a random secret, returned once in the register reply
(`node_token`) and stored as its sha256. The worker sends it as the `X-Node-Token` header on
every later call: re-registering the name, heartbeats and every `/api/node/<id>/*` route.
The registration token only says "may join this cluster"; the node credential says "is node <id>".

Checks on the node routes read the stored hash through a small cache (positive entries 10 s,
dropped at once on any node event for that node: re-key, deletion, re-registration), so a
heartbeat costs no database statement beyond what the checkpointer writes.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable

import asyncpg
from fastapi import Request
from fastapi.responses import JSONResponse

from corral.store import nodes as node_store

NODE_TOKEN_HEADER = "X-Node-Token"
CREDENTIAL_BYTES = 32
POSITIVE_TTL_S = 10.0
CACHE_MAX_ENTRIES = 100_000


def rekey_hint(node_id: str) -> str:
    return (
        f"an admin re-keys it with POST /api/nodes/{node_id}/rekey (its next registration then gets a new "
        f"credential) or removes it with DELETE /api/nodes/{node_id}"
    )


def new_credential() -> tuple[str, str]:
    """(secret for the worker, hash for the database)."""
    secret = secrets.token_urlsafe(CREDENTIAL_BYTES)
    return secret, credential_hash(secret)


def credential_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest() if secret else ""


def presented(request: Request) -> str:
    return request.headers.get(NODE_TOKEN_HEADER, "").strip()


def node_error(status: int, message: str) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": status, "message": message, "type": "node_error"}}, status_code=status
    )


class NodeCredentials:
    """Checks `X-Node-Token` against node <id>'s stored credential hash."""

    def __init__(self, pool: asyncpg.Pool, clock: Callable[[], float] = time.monotonic) -> None:
        self.pool, self._clock = pool, clock
        self._hashes: dict[str, tuple[str, float]] = {}
        self.lookups = 0

    async def _stored(self, node_id: str) -> str | None:
        entry = self._hashes.get(node_id)
        now = self._clock()
        if entry is not None and entry[1] > now:
            return entry[0]
        self.lookups += 1
        stored = await node_store.credential_of(self.pool, node_id)
        if stored:  # unknown and unkeyed nodes are not cached: registration changes them
            if len(self._hashes) >= CACHE_MAX_ENTRIES:
                self._hashes.clear()
            self._hashes[node_id] = (stored, now + POSITIVE_TTL_S)
        return stored

    def forget(self, node_id: str, _status: str = "") -> None:
        self._hashes.pop(node_id, None)

    async def refusal(self, node_id: str, secret: str) -> JSONResponse | None:
        """None when `secret` is node <id>'s credential; otherwise the answer (404, 401, 409 or 403)."""
        stored = await self._stored(node_id)
        if stored is None:
            return node_error(404, f"node {node_id} not found; register again")
        if not secret:
            return node_error(
                401,
                f"node credential required: send the {NODE_TOKEN_HEADER} header with the "
                "credential this node received at its first registration",
            )
        if not stored:
            return node_error(
                409,
                f"node {node_id} has no credential (re-keyed by an admin or registered before "
                "node credentials existed); register again to receive one",
            )
        if not hmac.compare_digest(credential_hash(secret), stored):
            return node_error(
                403,
                f"{NODE_TOKEN_HEADER} is not the credential of node {node_id}: a node may act "
                f"only as itself; if this worker lost its credential, {rekey_hint(node_id)}",
            )
        return None
