"""Each model's warm-path policy: its scheduling rule's routing fields over the process defaults.

Rules are re-read with the replica view (every VIEW_REFRESH_S) and applied at once on the frontend
that edits them; no database read on the warm path.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from corral.routing.pickers.base import (
    DEFAULT_BALANCE_ABS,
    DEFAULT_BALANCE_REL,
    DEFAULT_MIN_PREFIX_MATCH,
    Picker,
    Policy,
)
from corral.routing.pickers.least_loaded import LeastLoaded
from corral.routing.pickers.power_of_two import PowerOfTwo
from corral.routing.pickers.prefix_cache import PrefixCache
from corral.routing.pickers.round_robin import RoundRobin
from corral.routing.prefix_index import PrefixIndex

if TYPE_CHECKING:
    from corral.placement.rules import SchedulingRule

PICKERS = ("round_robin", "least_loaded", "prefix_cache", "power_of_two")


class RoutePolicies:
    def __init__(
        self,
        index: PrefixIndex | None = None,
        prefix_cache_default: bool = True,
        rng: random.Random | None = None,
    ) -> None:
        """`rng`: the pickers' random choices (anti-herding, power of two); tests pass a seeded one."""
        self.index = index if index is not None else PrefixIndex()  # an empty index is falsy
        self.default = Policy("prefix_cache" if prefix_cache_default else "least_loaded")
        rng = rng or random.Random()
        self.pickers: dict[str, Picker] = {
            "round_robin": RoundRobin(),
            "least_loaded": LeastLoaded(rng),
            "prefix_cache": PrefixCache(self.index, rng),
            "power_of_two": PowerOfTwo(rng),
        }
        self._by_model: dict[str, Policy] = {}

    def get(self, model: str) -> Policy:
        return self._by_model.get(model, self.default)

    def picker(self, policy: Policy) -> Picker:
        return self.pickers[policy.picker]

    def set_rule(self, rule: SchedulingRule, aliases: Mapping[str, str] | None = None) -> None:
        """Adopt a rule's routing fields (a rule keyed by an alias governs the model it names)."""
        model = (aliases or {}).get(rule.model_name, rule.model_name)
        self._by_model[model] = Policy(
            picker=rule.route_policy or self.default.picker,
            min_prefix_match=rule.min_prefix_match if rule.min_prefix_match > 0 else DEFAULT_MIN_PREFIX_MATCH,
            balance_abs=rule.balance_abs_threshold if rule.balance_abs_threshold > 0 else DEFAULT_BALANCE_ABS,
            balance_rel=rule.balance_rel_threshold if rule.balance_rel_threshold > 0 else DEFAULT_BALANCE_REL,
            source="rule",
        )

    def forget_rule(self, model: str) -> None:
        self._by_model.pop(model, None)

    def replace_rules(
        self, rules: Iterable[SchedulingRule], aliases: Mapping[str, str] | None = None
    ) -> None:
        self._by_model = {}
        for rule in rules:
            self.set_rule(rule, aliases)
