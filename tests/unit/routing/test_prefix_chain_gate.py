"""The router hashes a prompt only when the model routes by prefix cache among several replicas."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from corral.placement.rules import SchedulingRule
from corral.proto import backend_pb2 as pb
from corral.routing.local_replicas import LocalReplicas
from corral.routing.pickers.policies import RoutePolicies
from corral.routing.prefix_index import prefix_chain
from corral.routing.replica import Replica
from corral.routing.router import Router

CHAT: Any = SimpleNamespace(name="chat")
REQUEST = pb.PredictOptions(
    Messages=[pb.Message(role="system", content="be brief"), pb.Message(role="user", content="hi")]
)


def router(replicas: int) -> Router:
    local = LocalReplicas(None, "frontend-1", RoutePolicies(prefix_cache_default=True))  # type: ignore[arg-type]
    for i in range(replicas):
        local.view.add(Replica(model="chat", node_id=f"n{i}", node_name=f"node{i}", address=f"a{i}"))
    return Router(SimpleNamespace(aliases={"slot": "chat"}), local, None, None)  # type: ignore[arg-type]


def test_a_prefix_cache_model_with_two_replicas_hashes_its_canonical_messages() -> None:
    expected = prefix_chain("chat", "system\nbe brief\nuser\nhi\n")
    assert router(2).prefix_chain(CHAT, REQUEST) == expected


def test_nothing_is_hashed_for_a_lone_replica_or_another_picker() -> None:
    assert router(1).prefix_chain(CHAT, REQUEST) is None
    r = router(2)
    r.apply_route_rule(
        SchedulingRule(id="1", model_name="slot", route_policy="least_loaded")
    )  # keyed by an alias
    assert r.prefix_chain(CHAT, REQUEST) is None
    r.forget_route_rule("slot")
    assert r.prefix_chain(CHAT, REQUEST) is not None
