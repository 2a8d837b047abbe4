"""What a picker is given and what it answers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from corral.routing.replica import Replica

Load = Callable[["Replica"], int]

# Reference defaults (prefixcache/config.go); a rule's value overrides when > 0.
DEFAULT_MIN_PREFIX_MATCH = 0.3
DEFAULT_BALANCE_ABS = 2
DEFAULT_BALANCE_REL = 1.5


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
