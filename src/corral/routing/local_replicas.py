"""This frontend's in-memory replicas: the routable view, those with requests in flight here (even if
evicted from the view meanwhile), and the cluster-wide in-flight counts shared over NATS.

Built first when the frontend is assembled (frontend/main.py): the evictor reads its counts, the
load jobs report finished loads to it, and the router picks from it.
"""

from __future__ import annotations

from nats.aio.client import Client

from corral.loading.context import LoadedReplica
from corral.routing import events
from corral.routing.breaker import Breakers
from corral.routing.inflight import ClusterInFlight
from corral.routing.pickers.policies import RoutePolicies
from corral.routing.replica import Replica, ReplicaView


class LocalReplicas:
    def __init__(
        self,
        nc: Client,
        frontend_id: str,
        policies: RoutePolicies | None = None,
        breakers: Breakers | None = None,
    ) -> None:
        self.nc, self.frontend_id = nc, frontend_id
        self.active: dict[int, Replica] = {}  # replicas with requests in flight here (even if evicted)
        self.inflight = ClusterInFlight(nc, frontend_id, self.all)
        self.view = ReplicaView(self.inflight.total, policies, breakers)

    def all(self) -> list[Replica]:
        seen = {id(r): r for r in self.view.all()}
        seen.update(self.active)
        return list(seen.values())

    def in_flight(self, key: str) -> int:
        """Requests in flight on a replica from this frontend."""
        return sum(r.in_flight for r in self.all() if r.key == key)

    async def loaded(self, loaded: LoadedReplica) -> None:
        """A load job of this frontend finished: route to it at once, and tell every other frontend."""
        self.view.add(
            Replica(
                model=loaded.model,
                node_id=loaded.node_id,
                node_name=loaded.node_name,
                address=loaded.address,
                replica_index=loaded.replica_index,
            )
        )
        await events.publish(
            self.nc,
            events.ReplicaEvent(
                events.LOADED,
                loaded.model,
                loaded.node_id,
                loaded.node_name,
                loaded.replica_index,
                loaded.address,
            ),
        )
