"""NATS JWT minting with nkeys: claim shapes, scopes, signatures, seed checks."""

from __future__ import annotations

import base64
import json
from typing import Any

import nkeys
import pytest

from corral.bus import natsauth


def _parts(jwt: str) -> tuple[dict[str, Any], dict[str, Any], bytes, bytes]:
    """A JWT's header and claims (JSON), the signed bytes and the signature."""
    header, claims, sig = jwt.split(".")

    def pad(s: str) -> str:
        return s + "=" * (-len(s) % 4)

    return (
        json.loads(base64.urlsafe_b64decode(pad(header))),
        json.loads(base64.urlsafe_b64decode(pad(claims))),
        f"{header}.{claims}".encode(),
        base64.urlsafe_b64decode(pad(sig)),
    )


def test_a_minted_worker_credential_is_scoped_to_its_own_node_subjects() -> None:
    account = natsauth.create_pair("account")
    jwt, seed = natsauth.mint_worker(account, "node.1*", ttl_s=60)
    header, claims, signed, sig = _parts(jwt)
    assert header == {"typ": "JWT", "alg": "ed25519-nkey"}
    assert claims["iss"] == account.public_key and claims["exp"] - claims["iat"] == 60
    assert claims["sub"] == natsauth.pair_from_seed(seed).public_key and seed.startswith("SU")
    nats_claims = claims["nats"]
    assert nats_claims["sub"]["allow"] == ["nodes.node-1-.>", "_INBOX.>"]  # sanitised token: no wildcards
    assert "nodes.node-1-.backend.install.*.progress" in nats_claims["pub"]["allow"]
    assert "nodes.node-1-.backend.logs.*.lines" in nats_claims["pub"]["allow"]  # its own backends' live lines
    assert claims["name"] == "localai-backend-node-1-"
    verifier = nkeys.from_seed(bytearray(account.seed.encode()))
    assert verifier.verify(signed, sig)


def test_seed_kind_is_checked_and_the_error_names_the_setting() -> None:
    user = natsauth.create_pair("user")
    with pytest.raises(natsauth.NatsAuthError, match="LOCALAI_NATS_ACCOUNT_SEED is not a NATS account seed"):
        natsauth.pair_from_seed(user.seed, kind="account", setting="LOCALAI_NATS_ACCOUNT_SEED")
    with pytest.raises(natsauth.NatsAuthError, match="not a valid NATS nkey seed"):
        natsauth.pair_from_seed("SAnotaseed", setting="X")


def test_decode_claims_reads_what_encode_wrote() -> None:
    operator = natsauth.create_pair("operator")
    jwt = natsauth.operator_jwt(operator, "ASYS")
    assert natsauth.decode_claims(jwt)["nats"] == {"type": "operator", "version": 2, "system_account": "ASYS"}


def test_an_agent_node_is_minted_the_agent_worker_permissions_not_a_backend_workers() -> None:
    account = natsauth.create_pair("account")
    agent = natsauth.decode_claims(natsauth.mint_worker(account, "n.1", 60, "agent")[0])["nats"]
    backend = natsauth.decode_claims(natsauth.mint_worker(account, "n.1", 60, "backend")[0])["nats"]
    assert agent["pub"]["allow"] == ["agent.>", "jobs.>", "_INBOX.>"]
    assert {
        "mcp.tools.execute",
        "mcp.discovery",
        "agent.execute",
        "jobs.mcp-ci.new",
        "nodes.n-1.backend.stop",
    } <= set(agent["sub"]["allow"])
    assert not any("backend.install" in s for s in agent["sub"]["allow"] + agent["pub"]["allow"])
    assert "nodes.n-1.>" in backend["sub"]["allow"]
