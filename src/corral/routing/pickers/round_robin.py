"""`round_robin`: each replica of the model in turn, regardless of load."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from corral.routing.pickers.base import Decision, Load, Policy, loads_of

if TYPE_CHECKING:
    from corral.routing.replica import Replica


class RoundRobin:
    name = "round_robin"

    def __init__(self) -> None:
        self._turn: dict[str, int] = {}

    def pick(
        self, replicas: Sequence[Replica], load: Load, policy: Policy, chain: Sequence[int] | None
    ) -> Decision:
        model = replicas[0].model
        turn = self._turn.get(model, 0)
        self._turn[model] = turn + 1
        ordered = sorted(replicas, key=lambda r: r.key)
        chosen = ordered[turn % len(ordered)]
        return Decision(
            chosen, self.name, f"turn {turn % len(ordered) + 1} of {len(ordered)}", loads_of(replicas, load)
        )
