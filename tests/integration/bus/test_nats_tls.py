"""`tls://` NATS with a private CA (server TLS) and with client certificates (mTLS)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.bus import client as bus
from corral.bus.natsauth import NatsAuthError
from corral.bus.security import TlsFiles
from support.nats_servers import NatsServer, connect_refused, nats_server
from support.tls_ca import TlsFilesOnDisk, make_ca


@pytest.fixture(scope="module")
def ca(state_root: Path) -> TlsFilesOnDisk:
    return make_ca(state_root / "nats-tls-ca")


def _server(state_root: Path, name: str, ca: TlsFilesOnDisk, verify: bool) -> NatsServer:
    config = (
        f'tls {{\n  cert_file: "{ca.server_cert}"\n  key_file: "{ca.server_key}"\n'
        f'  ca_file: "{ca.ca}"\n  verify: {"true" if verify else "false"}\n  timeout: 2\n}}\n'
    )
    return nats_server(state_root / name, config, scheme="tls").start()


@pytest.fixture(scope="module")
def tls_server(state_root: Path, ca: TlsFilesOnDisk) -> Iterator[NatsServer]:
    server = _server(state_root, "nats-tls", ca, verify=False)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def mtls_server(state_root: Path, ca: TlsFilesOnDisk) -> Iterator[NatsServer]:
    server = _server(state_root, "nats-mtls", ca, verify=True)
    yield server
    server.stop()


async def _round_trip(url: str, tls: TlsFiles) -> bytes:
    nc = await bus.connect(url, "tls-test", tls=tls)
    try:
        sub = await nc.subscribe("tls.check")
        await nc.publish("tls.check", b"hello")
        return (await sub.next_msg(timeout=5)).data
    finally:
        await nc.close()


async def test_tls_with_a_private_ca(tls_server: NatsServer, ca: TlsFilesOnDisk) -> None:
    assert await _round_trip(tls_server.url, TlsFiles(ca=str(ca.ca))) == b"hello"


async def test_mtls_with_a_client_certificate(mtls_server: NatsServer, ca: TlsFilesOnDisk) -> None:
    tls = TlsFiles(ca=str(ca.ca), cert=str(ca.client_cert), key=str(ca.client_key))
    assert await _round_trip(mtls_server.url, tls) == b"hello"


async def test_mtls_without_a_client_certificate_is_refused(
    mtls_server: NatsServer, ca: TlsFilesOnDisk
) -> None:
    await connect_refused(mtls_server.url, tls=TlsFiles(ca=str(ca.ca)).context(mtls_server.url))


def test_a_cert_without_its_key_is_a_named_configuration_error() -> None:
    with pytest.raises(
        NatsAuthError, match="LOCALAI_NATS_TLS_CERT and LOCALAI_NATS_TLS_KEY must be set together"
    ):
        TlsFiles(cert="/x.pem").context("tls://h:4222")
