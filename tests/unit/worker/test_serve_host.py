"""Every listener a worker starts binds the host of --serve-addr (issue 10 item 5)."""

from __future__ import annotations

import pytest

from corral.worker.addresses import WorkerAddresses, resolve_addresses
from corral.worker.supervisor import BackendProcess


def _resolve(serve_addr: str, http_addr: str = "") -> WorkerAddresses:
    return resolve_addresses(
        addr="",
        serve_addr=serve_addr,
        grpc_max_port=0,
        http_addr=http_addr,
        advertise_addr="",
        advertise_http_addr="",
        hostname="box",
    )


def test_the_serve_host_comes_from_serve_addr_and_the_file_server_defaults_to_it() -> None:
    a = _resolve("10.1.2.3:7000")
    assert (a.serve_host, a.http_bind) == ("10.1.2.3", ("10.1.2.3", 6999))


def test_an_explicit_http_addr_still_wins_for_the_file_server() -> None:
    assert _resolve("10.1.2.3:7000", http_addr="127.0.0.1:9000").http_bind == ("127.0.0.1", 9000)


@pytest.mark.parametrize(
    "serve_addr, host",
    [
        ("0.0.0.0:50051", "0.0.0.0"),
        (":50051", "0.0.0.0"),  # empty host: all interfaces, as before
        ("[::1]:50051", "::1"),
    ],
)
def test_serve_host_of_each_address_form(serve_addr: str, host: str) -> None:
    assert _resolve(serve_addr).serve_host == host


@pytest.mark.parametrize(
    "bind, dialed",
    [
        ("0.0.0.0", "127.0.0.1:6000"),  # a wildcard bind is reached on loopback
        ("::", "[::1]:6000"),
        ("10.1.2.3", "10.1.2.3:6000"),  # a specific host is dialed where it listens
        ("::1", "[::1]:6000"),
    ],
)
def test_the_worker_dials_its_backend_where_it_listens(bind: str, dialed: str) -> None:
    proc = BackendProcess("m#0", "simulator", 6000, process=None, host=bind)  # type: ignore[arg-type]
    assert proc.local_address == dialed
