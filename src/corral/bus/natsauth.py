"""NATS decentralised auth with the `nkeys` library: key pairs, JWT claims, minting (reference §3.4).

A NATS JWT is `base64url(header).base64url(claims).base64url(ed25519 signature)` with header
`{"typ":"JWT","alg":"ed25519-nkey"}`; the issuer signs with its nkey. Operator → account →
user, each signed by the one above.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from dataclasses import dataclass
from typing import Any

import nkeys

from corral.bus.subjects import token

_HEADER = {"typ": "JWT", "alg": "ed25519-nkey"}

# Backend worker scope: its own control subjects and reply inboxes, nothing else (reference §3.4).
WORKER_SUB = ("nodes.{tok}.>", "_INBOX.>")
WORKER_PUB = (
    "nodes.{tok}.backend.install.*.progress",
    "nodes.{tok}.backend.logs.*.lines",
    "nodes.{tok}.files.>",
    "_INBOX.>",
)
# Agent worker scope (reference §3.4): the agent-workers queue subjects, job/agent events, its own
# backend.stop; never `nodes.<tok>.backend.install` or any other node's subjects.
AGENT_SUB = (
    "agent.execute",
    "agent.*.cancel",
    "gallery.*.cancel",
    "gallery.*.progress",
    "jobs.*.cancel",
    "jobs.*.progress",
    "jobs.*.result",
    "jobs.mcp-ci.new",
    "mcp.tools.execute",
    "mcp.discovery",
    "nodes.{tok}.backend.stop",
    "staging.*.progress",
    "_INBOX.>",
)
AGENT_PUB = ("agent.>", "jobs.>", "_INBOX.>")
# Frontend service user (from `corral nats-auth-setup`).
SERVICE_PUB = (
    "nodes.>",
    "gallery.>",
    "agent.>",
    "staging.>",
    "state.>",
    "jobs.>",
    "mcp.>",
    "cache.>",
    "prefixcache.>",
    "finetune.>",
    "corral.>",
    "_INBOX.>",
)
SERVICE_SUB = (
    "nodes.>",
    "gallery.>",
    "agent.>",
    "staging.>",
    "state.>",
    "jobs.>",
    "mcp.>",
    "cache.>",
    "prefixcache.>",
    "corral.>",
    "_INBOX.>",
)


class NatsAuthError(Exception):
    """NATS credentials are malformed or of the wrong kind; the message names the setting to fix."""


@dataclass(frozen=True)
class KeyPair:
    seed: str
    public_key: str

    def sign(self, data: bytes) -> bytes:
        return bytes(nkeys.from_seed(bytearray(self.seed.encode())).sign(data))


_PREFIXES = {
    "operator": nkeys.PREFIX_BYTE_OPERATOR,
    "account": nkeys.PREFIX_BYTE_ACCOUNT,
    "user": nkeys.PREFIX_BYTE_USER,
}


def create_pair(kind: str) -> KeyPair:
    seed = nkeys.encode_seed(os.urandom(32), _PREFIXES[kind]).decode()
    return pair_from_seed(seed)


def pair_from_seed(seed: str, *, kind: str = "", setting: str = "seed") -> KeyPair:
    """Load a seed; with `kind`, also check it is that kind of key (`SA…` account, `SU…` user, `SO…`)."""
    text = seed.strip()
    expected = {"operator": "SO", "account": "SA", "user": "SU"}.get(kind)
    if expected and not text.startswith(expected):
        raise NatsAuthError(f"{setting} is not a NATS {kind} seed (it must start with {expected})")
    try:
        kp = nkeys.from_seed(bytearray(text.encode()))
        public = kp.public_key.decode()
    except (nkeys.NkeysError, ValueError) as exc:
        raise NatsAuthError(f"{setting} is not a valid NATS nkey seed ({type(exc).__name__})") from None
    return KeyPair(seed=text, public_key=public)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def encode(claims: dict[str, Any], issuer: KeyPair) -> str:
    body = {**claims, "iss": issuer.public_key, "iat": int(claims.get("iat") or time.time())}
    body["jti"] = ""
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).digest()
    body["jti"] = base64.b32encode(digest).rstrip(b"=").decode()
    signing_input = f"{_b64(json.dumps(_HEADER).encode())}.{_b64(json.dumps(body).encode())}"
    return f"{signing_input}.{_b64(issuer.sign(signing_input.encode()))}"


def decode_claims(jwt: str) -> dict[str, Any]:
    """The claims of a JWT, unverified (for expiry bookkeeping only)."""
    try:
        return dict(json.loads(_unb64(jwt.split(".")[1])))
    except (IndexError, ValueError) as exc:
        raise NatsAuthError(f"not a NATS JWT ({type(exc).__name__})") from None


def operator_jwt(operator: KeyPair, system_account: str, name: str = "corral") -> str:
    return encode(
        {
            "sub": operator.public_key,
            "name": name,
            "nats": {"type": "operator", "version": 2, "system_account": system_account},
        },
        operator,
    )


def account_jwt(account: KeyPair, operator: KeyPair, name: str) -> str:
    limits = {
        "subs": -1,
        "data": -1,
        "payload": -1,
        "imports": -1,
        "exports": -1,
        "wildcards": True,
        "conn": -1,
        "leaf": -1,
    }
    return encode(
        {
            "sub": account.public_key,
            "name": name,
            "nats": {"type": "account", "version": 2, "limits": limits},
        },
        operator,
    )


def user_jwt(
    user_public: str,
    account: KeyPair,
    *,
    name: str,
    pub: tuple[str, ...],
    sub: tuple[str, ...],
    ttl_s: float | None = None,
) -> str:
    claims: dict[str, Any] = {
        "sub": user_public,
        "name": name,
        "nats": {
            "type": "user",
            "version": 2,
            "subs": -1,
            "data": -1,
            "payload": -1,
            "pub": {"allow": list(pub)},
            "sub": {"allow": list(sub)},
        },
    }
    if ttl_s:
        claims["exp"] = int(time.time() + ttl_s)
    return encode(claims, account)


def mint_worker(account: KeyPair, node_id: str, ttl_s: float, node_type: str = "backend") -> tuple[str, str]:
    """A fresh user credential scoped to one node's subjects: (jwt, user seed). An agent node gets the
    agent worker's permissions, a backend node (anything else) the backend worker's."""
    tok = token(node_id)
    user = create_pair("user")
    pub, sub = (AGENT_PUB, AGENT_SUB) if node_type == "agent" else (WORKER_PUB, WORKER_SUB)
    jwt = user_jwt(
        user.public_key,
        account,
        name=f"localai-{node_type}-{tok}",
        pub=tuple(p.format(tok=tok) for p in pub),
        sub=tuple(s.format(tok=tok) for s in sub),
        ttl_s=ttl_s,
    )
    return jwt, user.seed


def sign_nonce(seed: str, nonce: str) -> bytes:
    """What nats-py's signature callback returns: base64 of the ed25519 signature of the nonce."""
    return base64.b64encode(pair_from_seed(seed).sign(nonce.encode()))
