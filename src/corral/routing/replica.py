"""A routable replica and the frontend's in-memory view of them (no database on the warm path)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(eq=False)
class Replica:
    model: str
    node_id: str
    node_name: str
    address: str
    replica_index: int = 0
    in_flight: int = field(default=0, compare=False)


class ReplicaView:
    """Loaded replicas per model, as this frontend knows them; PostgreSQL stays the source of truth."""

    def __init__(self) -> None:
        self._by_model: dict[str, list[Replica]] = {}

    def pick(self, model: str) -> Replica | None:
        replicas = self._by_model.get(model)
        if not replicas:
            return None
        return min(replicas, key=lambda r: r.in_flight)

    def add(self, replica: Replica) -> Replica:
        replicas = self._by_model.setdefault(replica.model, [])
        for known in replicas:
            if known.node_id == replica.node_id and known.replica_index == replica.replica_index:
                known.address = replica.address
                return known
        replicas.append(replica)
        return replica

    def remove(self, replica: Replica) -> None:
        replicas = self._by_model.get(replica.model, [])
        if replica in replicas:
            replicas.remove(replica)

    def remove_node(self, node_id: str) -> None:
        for replicas in self._by_model.values():
            replicas[:] = [r for r in replicas if r.node_id != node_id]
