"""How a NATS connection authenticates (JWT + nkey seed) and when it uses TLS."""

from __future__ import annotations

import base64
from pathlib import Path

import nkeys
import pytest

from corral.bus.natsauth import NatsAuthError, create_pair
from corral.bus.security import NatsCredentials, TlsFiles


def test_static_credentials_check_the_seed_at_once_naming_the_setting() -> None:
    account = create_pair("account")
    with pytest.raises(NatsAuthError, match="LOCALAI_NATS_USER_SEED is not a NATS user seed"):
        NatsCredentials.static("jwt", account.seed)
    with pytest.raises(NatsAuthError, match="MY_SEED is not a valid NATS nkey seed"):
        NatsCredentials.static("jwt", "SUnot-a-seed", setting="MY_SEED")
    with pytest.raises(NatsAuthError, match="is not a NATS user seed"):
        NatsCredentials.static("jwt", "")


def test_the_connect_callbacks_send_the_jwt_and_sign_the_nonce() -> None:
    user = create_pair("user")
    options = NatsCredentials.static("header.claims.sig", user.seed).connect_options()
    jwt_cb, signature_cb = options["user_jwt_cb"], options["signature_cb"]
    assert callable(jwt_cb) and callable(signature_cb)
    assert jwt_cb() == b"header.claims.sig"
    signature = base64.b64decode(signature_cb("nonce-1"))
    assert nkeys.from_seed(bytearray(user.seed.encode())).verify(b"nonce-1", signature)


def test_the_jwt_is_read_again_on_every_connect() -> None:
    user = create_pair("user")
    current = ["first"]
    options = NatsCredentials(jwt=lambda: current[0], seed=lambda: user.seed).connect_options()
    jwt_cb = options["user_jwt_cb"]
    assert callable(jwt_cb)
    current[0] = "refreshed"
    assert jwt_cb() == b"refreshed"


def test_plain_nats_without_files_needs_no_tls() -> None:
    assert TlsFiles().context("nats://127.0.0.1:4222") is None


def test_a_tls_url_gets_a_verifying_context_even_without_files() -> None:
    ctx = TlsFiles().context("nats://a:4222,tls://b:4222")
    assert ctx is not None and ctx.check_hostname


@pytest.mark.parametrize("files", [TlsFiles(cert="/c.pem"), TlsFiles(key="/k.pem")])
def test_a_certificate_without_its_key_or_the_reverse_is_refused(files: TlsFiles) -> None:
    with pytest.raises(
        NatsAuthError, match="LOCALAI_NATS_TLS_CERT and LOCALAI_NATS_TLS_KEY must be set together"
    ):
        files.context("nats://a:4222")


def test_a_missing_ca_file_names_its_setting(tmp_path: Path) -> None:
    with pytest.raises(NatsAuthError, match="cannot read LOCALAI_NATS_TLS_CA"):
        TlsFiles(ca=str(tmp_path / "absent.pem")).context("tls://a:4222")


def test_an_unloadable_certificate_names_both_settings(tmp_path: Path) -> None:
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_bytes(b"\xff\xfe not a certificate")
    key.write_bytes(b"")
    with pytest.raises(NatsAuthError, match="cannot load LOCALAI_NATS_TLS_CERT/LOCALAI_NATS_TLS_KEY"):
        TlsFiles(cert=str(cert), key=str(key)).context("tls://a:4222")
