"""Each model's warm-path policy: its rule's routing fields over the process defaults."""

from __future__ import annotations

import pytest

from corral.placement.rules import SchedulingRule
from corral.routing.pickers.base import Policy
from corral.routing.pickers.policies import PICKERS, RoutePolicies
from corral.routing.pickers.prefix_cache import PrefixCache
from corral.routing.prefix_index import PrefixIndex


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


def test_every_named_picker_is_there_under_its_own_name() -> None:
    policies = RoutePolicies()
    assert set(policies.pickers) == set(PICKERS)
    for name in PICKERS:
        assert policies.picker(Policy(name)).name == name


def test_an_unknown_picker_name_is_a_key_error_not_a_silent_default() -> None:
    with pytest.raises(KeyError):
        RoutePolicies().picker(Policy("fastest"))


def test_replacing_the_rules_forgets_models_no_longer_ruled() -> None:
    policies = RoutePolicies(prefix_cache_default=False)
    policies.set_rule(SchedulingRule(id="1", model_name="a", route_policy="round_robin"))
    policies.replace_rules([SchedulingRule(id="2", model_name="b", route_policy="power_of_two")])
    assert policies.get("a") == Policy("least_loaded")
    assert policies.get("b").picker == "power_of_two" and policies.get("b").source == "rule"


def test_a_rule_without_a_picker_keeps_the_process_default() -> None:
    policies = RoutePolicies(prefix_cache_default=False)
    policies.set_rule(SchedulingRule(id="1", model_name="a", balance_rel_threshold=-1.0))
    assert policies.get("a") == Policy("least_loaded", source="rule")


def test_forgetting_a_model_without_a_rule_is_harmless() -> None:
    RoutePolicies().forget_rule("never-ruled")


def test_the_index_given_is_the_index_used_even_while_empty() -> None:
    index = PrefixIndex(ttl_s=5.0, max_blocks=10)
    policies = RoutePolicies(index)
    assert policies.index is index
    picker = policies.picker(Policy("prefix_cache"))
    assert isinstance(picker, PrefixCache) and picker.index is index
