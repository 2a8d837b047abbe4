"""What a picker answers: the decision the explain endpoint shows, and the loads it read."""

from __future__ import annotations

import dataclasses

import pytest

from corral.routing.pickers.base import (
    DEFAULT_BALANCE_ABS,
    DEFAULT_BALANCE_REL,
    DEFAULT_MIN_PREFIX_MATCH,
    Decision,
    Policy,
    loads_of,
)
from corral.routing.replica import Replica


def test_a_policy_defaults_to_the_reference_thresholds() -> None:
    policy = Policy("least_loaded")
    assert (policy.min_prefix_match, policy.balance_abs, policy.balance_rel, policy.source) == (
        DEFAULT_MIN_PREFIX_MATCH,
        DEFAULT_BALANCE_ABS,
        DEFAULT_BALANCE_REL,
        "default",
    )
    assert (DEFAULT_MIN_PREFIX_MATCH, DEFAULT_BALANCE_ABS, DEFAULT_BALANCE_REL) == (0.3, 2, 1.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.picker = "round_robin"  # type: ignore[misc]


def test_the_explanation_names_picker_replica_node_reason_and_loads() -> None:
    replica = Replica(model="m", node_id="n1", node_name="gpu-1", address="a:1", replica_index=2)
    decision = Decision(
        replica, "prefix_cache", "why", {"n1/m#2": 3}, match_blocks=4, chain_blocks=8, at_s=12.5
    )
    assert decision.explain() == {
        "picker": "prefix_cache",
        "replica": "n1/m#2",
        "node": "gpu-1",
        "reason": "why",
        "loads": {"n1/m#2": 3},
        "match_blocks": 4,
        "chain_blocks": 8,
        "at": 12.5,
    }


def test_a_decision_starts_with_no_loads_and_no_match() -> None:
    replica = Replica(model="m", node_id="n", node_name="n", address="a")
    decision = Decision(replica, "least_loaded", "r")
    assert (decision.loads, decision.match_blocks, decision.chain_blocks, decision.at_s) == ({}, 0, 0, 0.0)


def test_loads_are_keyed_by_replica() -> None:
    rs = [Replica(model="m", node_id=f"n{i}", node_name="n", address="a") for i in range(3)]
    assert loads_of(rs, lambda r: len(r.node_id) * 10) == {"n0/m#0": 20, "n1/m#0": 20, "n2/m#0": 20}
    assert loads_of([], lambda r: 1) == {}
