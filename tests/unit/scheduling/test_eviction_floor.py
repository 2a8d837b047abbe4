"""Eviction never takes a rule-governed model below its minimum."""

from __future__ import annotations

from typing import Any

from corral.placement.snapshot import NodeSnapshot, ReplicaSnapshot
from corral.routing.eviction import Evictor


class _NoPeers:
    def last_used_s(self, _key: str) -> float:
        return 0.0

    def remote_total(self, _key: str) -> int:
        return 0


def _evictor() -> Evictor:
    none: Any = None
    return Evictor(none, none, _NoPeers(), lambda _key: 0, wait_s=1.0)  # type: ignore[arg-type]


def _nodes() -> list[NodeSnapshot]:
    def loaded(model: str, used_s: float) -> ReplicaSnapshot:
        return ReplicaSnapshot(model=model, replica_index=0, state="loaded", last_used_s=used_s)

    return [NodeSnapshot(id=n, name=n, address="", http_address="", replicas=(loaded("pinned", 1.0), loaded(
        "free", 2.0 if n == "a" else 3.0))) for n in ("a", "b")]


def test_replicas_at_a_rule_minimum_are_not_candidates() -> None:
    candidates = _evictor()._candidates(_nodes(), "incoming", {"pinned": 2})
    assert [(c.replica.model, c.node.name) for c in candidates] == [("free", "a"), ("free", "b")]


def test_replicas_above_the_minimum_stay_candidates_least_recently_used_first() -> None:
    candidates = _evictor()._candidates(_nodes(), "incoming", {"pinned": 1})
    assert [(c.replica.model, c.node.name) for c in candidates][:2] == [("pinned", "a"), ("pinned", "b")]
    assert len(_evictor()._candidates(_nodes(), "incoming")) == 4  # no rules: everything idle is fair game
