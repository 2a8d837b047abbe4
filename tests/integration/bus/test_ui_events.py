"""`/api/events`' hub on a real NATS server: the bus's change hints reach UI clients, filtered and bounded."""

from __future__ import annotations

import asyncio
import json

import nats

from corral.frontend.admin.events import CLIENT_QUEUE_MAX, EventHub, event_payload
from corral.nodes.events import publish_node_event


async def test_bus_hints_reach_a_client_with_only_their_routing_fields(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        hub = EventHub(nc)
        async with hub.client() as queue:
            await publish_node_event(nc, "node-1", "draining")
            await nc.publish(
                "corral.replicas",
                json.dumps(
                    {
                        "op": "loaded",
                        "model": "m",
                        "node_id": "n",
                        "node_name": "w",
                        "replica_index": 0,
                        "address": "10.0.0.1:5000",
                        "mark": "secret-ish",
                    }
                ).encode(),
            )
            await nc.publish("corral.load.m", b"not json")  # dropped
            await nc.publish(
                "corral.load.m", json.dumps({"tracking_key": "m", "ok": True, "error": None}).encode()
            )
            got = [await asyncio.wait_for(queue.get(), 5) for _ in range(3)]
        assert got[0] == {"kind": "node", "node_id": "node-1", "status": "draining"}
        assert got[1] == {
            "kind": "replica",
            "op": "loaded",
            "model": "m",
            "node_id": "n",
            "node_name": "w",
            "replica_index": 0,
        }  # no address, no mark
        assert got[2]["kind"] == "load" and got[2]["ok"] is True
        assert hub.client_count == 0
    finally:
        await nc.close()


async def test_a_client_that_does_not_read_is_told_to_resync() -> None:
    hub = EventHub(nc=None)  # type: ignore[arg-type]
    hub._subscribed = True
    async with hub.client() as queue:
        for i in range(CLIENT_QUEUE_MAX + 5):
            hub.publish({"kind": "node", "node_id": str(i)})
        assert queue.qsize() <= CLIENT_QUEUE_MAX
        drained = [queue.get_nowait() for _ in range(queue.qsize())]
    assert {"kind": "resync"} in drained


def test_payloads_are_cut_and_malformed_ones_dropped() -> None:
    assert event_payload("node", b"[1, 2]") is None
    assert event_payload("node", b"{") is None
    long = event_payload("node", json.dumps({"node_id": "x" * 5000, "status": {"nested": 1}}).encode())
    assert long is not None and len(long["node_id"]) == 255 and "status" not in long
