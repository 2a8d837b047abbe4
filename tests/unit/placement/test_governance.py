"""Which rule governs a model: the model's own rule wins, else the oldest alias rule; dangling aliases
govern nothing."""

from __future__ import annotations

from collections.abc import Callable

from corral.models.aliases import Resolution, resolve
from corral.placement.governance import Governance, conflicting_rule, govern, governing_rule
from corral.placement.rules import SchedulingRule

MODELS = {"llama3", "llama4"}
ALIASES = {"production": "llama3", "staging": "production", "gone": "llama2"}


def rule(name: str, created_s: float) -> SchedulingRule:
    return SchedulingRule(id=f"id-{name}", model_name=name, created_s=created_s, min_replicas=1)


def resolver(aliases: dict[str, str] = ALIASES) -> Callable[[str], Resolution]:
    return lambda name: resolve(name, MODELS, aliases)


def test_a_rule_keyed_by_the_model_name_wins_over_an_older_alias_rule() -> None:
    rules = [rule("production", 1.0), rule("llama3", 2.0)]
    governance = govern(rules, resolver())
    assert governance["llama3"] == Governance("llama3")
    assert governance["production"] == Governance("llama3", shadowed_by="llama3")
    assert governing_rule("llama3", rules, resolver()) is rules[1]


def test_among_alias_rules_the_oldest_governs() -> None:
    rules = [rule("prod-b", 5.0), rule("prod-a", 1.0)]
    aliases = {"prod-a": "llama3", "prod-b": "llama3"}
    governance = govern(rules, resolver(aliases))
    assert governance["prod-a"].governs and governance["prod-b"].shadowed_by == "prod-a"


def test_a_rule_follows_its_alias_when_it_is_repointed() -> None:
    rules = [rule("production", 1.0)]
    assert governing_rule("llama3", rules, resolver()) is rules[0]
    repointed = resolver({"production": "llama4"})
    assert governing_rule("llama3", rules, repointed) is None  # llama3 falls back to on-demand placement
    assert governing_rule("llama4", rules, repointed) is rules[0]


def test_a_rule_keyed_by_a_dangling_alias_governs_nothing() -> None:
    governance = govern([rule("gone", 1.0)], resolver())
    assert governance["gone"].target is None and not governance["gone"].governs
    assert "not a configured model" in governance["gone"].problem


def test_a_new_rule_conflicts_with_the_rule_that_already_governs_its_target() -> None:
    rules = [rule("llama3", 1.0)]
    assert conflicting_rule("production", rules, resolver()) == "llama3"
    assert conflicting_rule("llama3", [rule("production", 1.0)], resolver()) == "production"
    assert conflicting_rule("llama3", rules, resolver()) is None  # updating the rule itself
    assert conflicting_rule("llama4", rules, resolver()) is None
