"""A routable replica and the frontend's in-memory view of them (no database on the warm path)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from corral.routing.breaker import Breakers, avoided
from corral.routing.pickers.base import Decision
from corral.routing.pickers.policies import RoutePolicies


def replica_key(node_id: str, model: str, replica_index: int) -> str:
    return f"{node_id}/{model}#{replica_index}"


@dataclass(eq=False)
class Replica:
    model: str
    node_id: str
    node_name: str
    address: str
    replica_index: int = 0
    in_flight: int = field(default=0, compare=False)  # this frontend's requests
    last_used_s: float = field(default=0.0, compare=False)
    key: str = field(init=False, compare=False, repr=False)  # identity, computed once (read on every request)

    def __post_init__(self) -> None:
        self.key = replica_key(self.node_id, self.model, self.replica_index)


class ReplicaView:
    """Loaded replicas per model, as this frontend knows them; PostgreSQL stays the source of truth.

    `pick` reads only memory: the model's picker (routing/pickers) chooses among its replicas whose circuit
    breaker lets them be picked (routing/breaker.py), avoiding the replicas the request already failed on.
    A replica that leaves the view, or comes back at another address, is dropped from the prefix index and
    its breaker forgotten.
    """

    def __init__(
        self,
        cluster_in_flight: Callable[[Replica], int] | None = None,
        policies: RoutePolicies | None = None,
        breakers: Breakers | None = None,
    ) -> None:
        self._by_model: dict[str, list[Replica]] = {}
        self._cluster_in_flight = cluster_in_flight or (lambda r: r.in_flight)
        self.policies = policies or RoutePolicies(prefix_cache_default=False)
        self.breakers = breakers or Breakers()
        self.decisions: dict[str, Decision] = {}  # the last pick per model, for the explain endpoint

    def pick(self, model: str, chain: Sequence[int] | None = None) -> Replica | None:
        """The replica to call, None when the model has none (the cold path loads one); raises
        ReplicasUnavailable when every replica's breaker is open."""
        replicas = self._by_model.get(model)
        if not replicas:
            return None
        tripped = self.breakers.tripped
        if tripped or avoided.get():
            replicas = self._pickable(model, replicas)
        if len(replicas) == 1 and chain is None:  # the common case needs no cluster-wide count
            chosen = replicas[0]
        else:
            policy = self.policies.get(model)
            decision = self.policies.picker(policy).pick(replicas, self._cluster_in_flight, policy, chain)
            decision.at_s = time.time()
            self.decisions[model] = decision
            chosen = decision.replica
        if tripped:
            self.breakers.picked(chosen.key)
        return chosen

    def _pickable(self, model: str, replicas: list[Replica]) -> list[Replica]:
        """Replicas whose breaker allows a pick, less those this request failed on (unless that leaves none)."""
        usable = [r for r in replicas if self.breakers.may_pick(r.key)]
        if not usable:
            raise self.breakers.unavailable(model, replicas)
        avoid = avoided.get()
        return [r for r in usable if r.key not in avoid] or usable

    def count(self, model: str) -> int:
        return len(self._by_model.get(model, ()))

    def replicas_of(self, model: str) -> list[Replica]:
        return self._by_model.get(model) or []

    def _dropped(self, replica: Replica) -> None:
        self.policies.index.drop(replica.key)
        self.breakers.forget(replica.key)

    def touch(self, replica: Replica) -> None:
        replica.last_used_s = time.time()

    def add(self, replica: Replica) -> Replica:
        replicas = self._by_model.setdefault(replica.model, [])
        for known in replicas:
            if known.key == replica.key:
                if known.address != replica.address:
                    self._dropped(known)
                known.address = replica.address
                return known
        replicas.append(replica)
        return replica

    def remove(self, replica: Replica) -> None:
        self.remove_key(replica.model, replica.key)

    def remove_key(self, model: str, key: str) -> Replica | None:
        replicas = self._by_model.get(model, [])
        for known in replicas:
            if known.key == key:
                replicas.remove(known)
                self._dropped(known)
                return known
        return None

    def remove_node(self, node_id: str) -> list[Replica]:
        """Drop every replica of the node; the ones dropped."""
        dropped: list[Replica] = []
        for replicas in self._by_model.values():
            for gone in [r for r in replicas if r.node_id == node_id]:
                self._dropped(gone)
                dropped.append(gone)
            replicas[:] = [r for r in replicas if r.node_id != node_id]
        return dropped

    def replace_all(self, fresh: Iterable[Replica]) -> None:
        """Adopt a full re-read from PostgreSQL, keeping local counters of replicas that survive."""
        old = {r.key: r for replicas in self._by_model.values() for r in replicas}
        by_model: dict[str, list[Replica]] = {}
        for replica in fresh:
            kept = old.get(replica.key)
            if kept is not None and kept.address == replica.address:
                replica.in_flight, replica.last_used_s = kept.in_flight, kept.last_used_s
                replica = kept
            by_model.setdefault(replica.model, []).append(replica)
        kept_ids = {id(r) for replicas in by_model.values() for r in replicas}
        for gone in old.values():
            if id(gone) not in kept_ids:
                self._dropped(gone)
        self._by_model = by_model

    def all(self) -> list[Replica]:
        return [r for replicas in self._by_model.values() for r in replicas]
