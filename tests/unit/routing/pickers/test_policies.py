"""Each model's warm-path policy: its rule's routing fields over the process defaults."""

from __future__ import annotations

from corral.placement.rules import SchedulingRule
from corral.routing.pickers.base import Policy
from corral.routing.pickers.policies import RoutePolicies


def test_a_rule_chooses_the_picker_and_overrides_thresholds_when_positive() -> None:
    policies = RoutePolicies(prefix_cache_default=True)
    assert policies.get("m").picker == "prefix_cache"
    policies.set_rule(
        SchedulingRule(
            id="1",
            model_name="alias",
            route_policy="",
            balance_abs_threshold=64,
            balance_rel_threshold=0.0,
            min_prefix_match=0.5,
        ),
        {"alias": "m"},
    )
    assert policies.get("m") == Policy("prefix_cache", 0.5, 64, 1.5, "rule")
    policies.set_rule(SchedulingRule(id="2", model_name="m", route_policy="round_robin"))
    assert policies.get("m").picker == "round_robin"
    policies.forget_rule("m")
    assert policies.get("m").picker == "prefix_cache"
    assert RoutePolicies(prefix_cache_default=False).get("m").picker == "least_loaded"
