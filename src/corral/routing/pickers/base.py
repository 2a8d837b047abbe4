"""What a picker is given and what it answers."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from corral.routing.replica import Replica

Load = Callable[["Replica"], int]

# Reference defaults (prefixcache/config.go); a rule's value overrides when > 0.
DEFAULT_MIN_PREFIX_MATCH = 0.3
DEFAULT_BALANCE_ABS = 2
DEFAULT_BALANCE_REL = 1.5
# Anti-herding: loads within this fraction of the least (rounded down: 0 and 1 differ, 20 and 22 do not) are
# near-equal, and a random one of those replicas serves. Frontends that see the same counts (shared over NATS)
# then spread their picks instead of all sending their next request to the same replica at once.
NEAR_EQUAL_REL = 0.1


@dataclass(frozen=True)
class Policy:
    """A model's resolved warm-path policy."""

    picker: str
    min_prefix_match: float = DEFAULT_MIN_PREFIX_MATCH
    balance_abs: int = DEFAULT_BALANCE_ABS
    balance_rel: float = DEFAULT_BALANCE_REL
    source: str = "default"  # "default" (the process setting) or "rule"


@dataclass
class Decision:
    replica: Replica
    picker: str
    reason: str
    loads: dict[str, int] = field(default_factory=dict)
    match_blocks: int = 0
    chain_blocks: int = 0
    at_s: float = 0.0

    def explain(self) -> dict[str, object]:
        return {
            "picker": self.picker,
            "replica": self.replica.key,
            "node": self.replica.node_name,
            "reason": self.reason,
            "loads": self.loads,
            "match_blocks": self.match_blocks,
            "chain_blocks": self.chain_blocks,
            "at": self.at_s,
        }


class Picker(Protocol):
    name: str

    def pick(
        self, replicas: Sequence[Replica], load: Load, policy: Policy, chain: Sequence[int] | None
    ) -> Decision: ...


def loads_of(replicas: Sequence[Replica], load: Load) -> dict[str, int]:
    return {r.key: load(r) for r in replicas}


def least_loaded(replicas: Sequence[Replica], loads: Mapping[str, int], rng: random.Random) -> Replica:
    """A random one of the replicas whose load is within NEAR_EQUAL_REL of the least (anti-herding)."""
    low = min(loads[r.key] for r in replicas)
    bound = low + int(low * NEAR_EQUAL_REL)
    near = [r for r in replicas if loads[r.key] <= bound]
    return near[0] if len(near) == 1 else rng.choice(near)
