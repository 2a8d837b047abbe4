"""`least_loaded`: fewest requests in flight cluster-wide; among near-equal loads a random replica (anti-herding:
frontends that see the same counts do not all pick the same replica)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from corral.routing.pickers.base import Decision, Load, Policy, least_loaded, loads_of

if TYPE_CHECKING:
    from corral.routing.replica import Replica


class LeastLoaded:
    name = "least_loaded"

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def pick(
        self, replicas: Sequence[Replica], load: Load, policy: Policy, chain: Sequence[int] | None
    ) -> Decision:
        loads = loads_of(replicas, load)
        chosen = least_loaded(replicas, loads, self._rng)
        return Decision(
            chosen, self.name, "fewest requests in flight, a random one among near-equal loads", loads
        )
