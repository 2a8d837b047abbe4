"""`prefix_cache`: the replica holding the longest prefix of the prompt, unless the load guard says no.

Load guard (the reference's semantics): with `min` the fewest requests in flight among the model's
replicas, a replica is eligible iff in_flight ≤ min + balance_abs_threshold and
in_flight ≤ min × balance_rel_threshold + 1. The best-matching replica wins when its match covers at
least `min_prefix_match` of the prompt's blocks and it is eligible; otherwise the least loaded replica
wins, so the picker is never worse than least_loaded under skew. Among replicas with the same longest
match, the least loaded one wins (a shared system prompt spreads over the replicas that hold it). "Least loaded"
is a random one among near-equal loads (anti-herding, pickers/base.py).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from corral.routing.pickers.base import Decision, Load, Policy, least_loaded, loads_of
from corral.routing.prefix_index import PrefixIndex

if TYPE_CHECKING:
    from corral.routing.replica import Replica


def eligible(in_flight: int, min_in_flight: int, policy: Policy) -> bool:
    return (
        in_flight <= min_in_flight + policy.balance_abs
        and in_flight <= min_in_flight * policy.balance_rel + 1
    )


class PrefixCache:
    name = "prefix_cache"

    def __init__(self, index: PrefixIndex, rng: random.Random | None = None) -> None:
        self.index = index
        self._rng = rng or random.Random()

    def pick(
        self, replicas: Sequence[Replica], load: Load, policy: Policy, chain: Sequence[int] | None
    ) -> Decision:
        loads = loads_of(replicas, load)
        least = least_loaded(replicas, loads, self._rng)
        if not chain:
            return Decision(least, self.name, "no prompt to match: least loaded", loads)
        depth, holders = self.index.match(chain, loads)
        ratio = depth / len(chain)
        if not depth:
            return Decision(least, self.name, "no replica holds a prefix: least loaded", loads, 0, len(chain))
        by_key = {r.key: r for r in replicas}
        hot = least_loaded([by_key[k] for k in holders], loads, self._rng)
        if ratio < policy.min_prefix_match:
            return Decision(
                least,
                self.name,
                f"best match {ratio:.2f} of the prompt is below min_prefix_match "
                f"{policy.min_prefix_match:g}: least loaded",
                loads,
                depth,
                len(chain),
            )
        min_load = loads[least.key]
        if not eligible(loads[hot.key], min_load, policy):
            return Decision(
                least,
                self.name,
                f"{hot.key} holds {ratio:.2f} of the prompt but has "
                f"{loads[hot.key]} in flight vs {min_load} (balance_abs_threshold "
                f"{policy.balance_abs}, balance_rel_threshold {policy.balance_rel:g}): least loaded",
                loads,
                depth,
                len(chain),
            )
        return Decision(
            hot,
            self.name,
            f"holds {depth} of {len(chain)} prompt blocks ({ratio:.2f})",
            loads,
            depth,
            len(chain),
        )
