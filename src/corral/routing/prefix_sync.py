"""Prefix observations shared across frontends on NATS (`prefixcache.observe`, the reference's subject).

A frontend publishes (model, chain, node_id, replica) when its index learned something new; peers
apply it without re-publishing. An observation is a hint: only replicas in the receiver's routable
view (from PostgreSQL) are ever candidates, so a stale or forged one costs a cache miss, no more.
A restarted frontend starts cold and learns again from its peers' next observations.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from nats.aio.client import Client
from nats.aio.msg import Msg

from corral.models.names import is_valid_name
from corral.routing.prefix_index import MAX_DEPTH, PrefixIndex
from corral.routing.replica import replica_key

log = logging.getLogger(__name__)

SUBJECT = "prefixcache.observe"
_U64 = (1 << 64) - 1


async def publish(
    nc: Client, frontend_id: str, model: str, chain: Sequence[int], node_id: str, replica_index: int
) -> None:
    body = {
        "model": model,
        "chain": list(chain),
        "node_id": node_id,
        "replica": replica_index,
        "frontend": frontend_id,
    }
    await nc.publish(SUBJECT, json.dumps(body).encode())


def apply(index: PrefixIndex, frontend_id: str, data: bytes) -> bool:
    """Apply a peer's observation; False (and nothing changes) when it is ours or malformed."""
    try:
        body = json.loads(data)
        model, chain, node_id, replica = body["model"], body["chain"], body["node_id"], body["replica"]
    except (ValueError, TypeError, KeyError):
        return False
    if (
        body.get("frontend") == frontend_id
        or not isinstance(model, str)
        or not is_valid_name(model)
        or not isinstance(node_id, str)
        or not isinstance(replica, int)
        or not isinstance(chain, list)
        or len(chain) > MAX_DEPTH
        or not all(isinstance(h, int) and 0 <= h <= _U64 for h in chain)
    ):
        return False
    index.observe(chain, replica_key(node_id, model, replica))
    return True


async def subscribe(nc: Client, index: PrefixIndex, frontend_id: str) -> None:
    async def on_msg(msg: Msg) -> None:
        if not apply(index, frontend_id, msg.data):
            log.debug("ignoring prefix observation (own or malformed)")

    await nc.subscribe(SUBJECT, cb=on_msg)
