"""The backend server's `--addr`: HOST:PORT, IPv6 in brackets."""

from __future__ import annotations

import pytest

from corral.backends.server import AddressError, ListenAddress, parse_addr


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:50051", ListenAddress("127.0.0.1", 50051)),
        ("0.0.0.0:1", ListenAddress("0.0.0.0", 1)),
        ("localhost:65535", ListenAddress("localhost", 65535)),
        ("[::1]:50051", ListenAddress("::1", 50051)),
    ],
)
def test_listen_addresses_parse_as_host_and_port(text: str, expected: ListenAddress) -> None:
    assert parse_addr(text) == expected


def test_ipv6_listen_addresses_render_with_brackets() -> None:
    assert str(ListenAddress("::1", 5)) == "[::1]:5"


@pytest.mark.parametrize("text", ["", "50051", "host:", ":50051", "host:0", "host:65536", "host:http"])
def test_malformed_listen_addresses_are_rejected_with_an_example(text: str) -> None:
    with pytest.raises(AddressError, match="HOST:PORT"):
        parse_addr(text)
