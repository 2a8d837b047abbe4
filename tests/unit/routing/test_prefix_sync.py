"""Applying a peer's prefix observation: ours and malformed ones change nothing."""

from __future__ import annotations

import json

from corral.routing.prefix_index import PrefixIndex
from corral.routing.prefix_sync import apply


def body(**over: object) -> bytes:
    msg = {"model": "m", "chain": [1, 2], "node_id": "n1", "replica": 1, "frontend": "peer"}
    msg.update(over)
    return json.dumps(msg).encode()


def test_a_peer_observation_is_indexed_under_its_replica() -> None:
    index = PrefixIndex()
    assert apply(index, "me", body()) is True
    assert index.match([1, 2, 3], ["n1/m#1"]) == (2, ["n1/m#1"])


def test_own_forged_and_malformed_observations_are_ignored() -> None:
    index = PrefixIndex()
    for data in (
        body(frontend="me"),
        b"not json",
        body(chain="x"),
        body(chain=[-1]),
        body(chain=[1 << 64]),
        body(replica="1"),
        body(model="../x"),
        body(chain=list(range(65))),
        json.dumps([1]).encode(),
    ):
        assert apply(index, "me", data) is False
    assert len(index) == 0
