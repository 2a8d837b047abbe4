"""The in-flight ack set and the peer set are bounded (routing/inflight.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import cast

from nats.aio.msg import Msg

from corral.routing import inflight
from corral.routing.inflight import AckSet, ClusterInFlight


def test_an_ack_is_reported_until_its_ttl_then_dropped() -> None:
    now = [1000.0]
    acks = AckSet(ttl_s=120.0, clock=lambda: now[0])
    acks.add("old")
    now[0] += 100.0
    acks.add("new")
    assert acks.current() == ["new", "old"] and "old" in acks
    now[0] += 30.0  # "old" is 130 s old: past every wait for it
    assert acks.current() == ["new"] and "old" not in acks and len(acks) == 1


@dataclass
class _Msg:  # the one attribute the report handler reads
    data: bytes


def _report(frontend: str, counts: dict[str, int]) -> Msg:
    report = json.dumps({"frontend": frontend, "counts": counts, "acks": [], "used": {}}).encode()
    return cast(Msg, _Msg(report))  # a stand-in with the one attribute read


async def test_a_silent_peer_is_forgotten_not_kept_forever() -> None:
    now = [5000.0]
    counts = ClusterInFlight(None, "me", lambda: [], clock=lambda: now[0])  # type: ignore[arg-type]  # fed reports
    await counts._on_report(_report("gone", {"n/m#0": 2}))
    assert counts.remote_total("n/m#0") == 2
    now[0] += inflight.PEER_FORGET_S + 1
    await counts._on_report(_report("alive", {"n/m#0": 1}))
    assert set(counts._remote) == {"alive"} and counts.remote_total("n/m#0") == 1
