"""frontend/sources: the source address per-source limits count by, and the bounded table they count in."""

from __future__ import annotations

import pytest

from corral.frontend.sources import SourceTable, source_of


def test_a_source_table_keeps_at_most_its_size() -> None:
    table: SourceTable[int] = SourceTable(3)
    for i in range(10):
        table.setdefault(str(i), lambda i=i: i)  # type: ignore[misc]
    assert len(table) == 3 and table.get("9") == 9 and table.get("6") is None


@pytest.mark.parametrize(
    "client, source",
    [
        (("192.0.2.7", 5000), "192.0.2.7"),
        (("2001:db8:1:2:3:4:5:6", 5000), "2001:db8:1:2::/64"),  # one host's /64 is one source
        (None, "-"),
    ],
)
def test_the_source_is_the_peer_address_and_an_ipv6_peer_counts_by_its_64(
    client: object, source: str
) -> None:
    assert source_of({"client": client}) == source
