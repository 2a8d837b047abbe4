"""`least_loaded`: fewest requests in flight cluster-wide, then least recently used."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from corral.routing.pickers.base import Decision, Load, Policy, loads_of

if TYPE_CHECKING:
    from corral.routing.replica import Replica


class LeastLoaded:
    name = "least_loaded"

    def pick(
        self, replicas: Sequence[Replica], load: Load, policy: Policy, chain: Sequence[int] | None
    ) -> Decision:
        loads = loads_of(replicas, load)
        chosen = min(replicas, key=lambda r: (loads[r.key], r.last_used_s))
        return Decision(chosen, self.name, "fewest requests in flight, then least recently used", loads)
