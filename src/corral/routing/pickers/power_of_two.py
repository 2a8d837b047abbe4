"""`power_of_two`: two replicas drawn at random, the less loaded one wins (no herding on one replica
when many frontends see the same stale counts)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from corral.routing.pickers.base import Decision, Load, Policy, least_loaded

if TYPE_CHECKING:
    from corral.routing.replica import Replica


class PowerOfTwo:
    name = "power_of_two"

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def pick(
        self, replicas: Sequence[Replica], load: Load, policy: Policy, chain: Sequence[int] | None
    ) -> Decision:
        a, b = self._rng.sample(list(replicas), 2) if len(replicas) > 1 else (replicas[0], replicas[0])
        loads = {a.key: load(a), b.key: load(b)}
        chosen = least_loaded((a, b), loads, self._rng)
        return Decision(chosen, self.name, f"less loaded of two random replicas ({a.key}, {b.key})", loads)
