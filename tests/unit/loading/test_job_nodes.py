"""The error once no further node can take a load names every node tried and why."""

from __future__ import annotations

from corral.loading.errors import NodeLost
from corral.loading.job_nodes import nodes_exhausted


def test_the_exhausted_error_lists_each_node_and_its_cause_then_what_stopped_the_search() -> None:
    tried = [
        NodeLost("w1", "not answering on the bus (NATS no responders); marked unhealthy", "id-1"),
        NodeLost("w2", "staging made no progress for 3s (stall window, CORRAL_LOAD_STALL_WINDOW)", "id-2"),
    ]
    assert nodes_exhausted("llama", tried, "gave up after 3 nodes") == (
        "loading model llama: 2 node(s) stopped answering (w1: not answering on the bus (NATS no responders); "
        "marked unhealthy; w2: staging made no progress for 3s (stall window, CORRAL_LOAD_STALL_WINDOW)); "
        "gave up after 3 nodes"
    )
