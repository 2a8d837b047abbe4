"""Which scheduling rule governs which model, when rules may be keyed by aliases.

One load of a model serves every name that resolves to it, so only one rule may decide where it
runs. When several rules end up on one model anyway (a declarative seed, an alias repointed onto
a model that has a rule), the rule keyed by the model's own name governs, else the oldest; the
others are shadowed. A rule whose alias resolves to nothing governs nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from corral.models.aliases import Resolution
from corral.placement.rules import SchedulingRule

Resolver = Callable[[str], Resolution]


@dataclass(frozen=True)
class Governance:
    target: str | None  # the model the rule governs (None: its alias resolves to nothing)
    shadowed_by: str = ""  # the governing rule's name when this one is shadowed
    problem: str = ""  # why the rule governs nothing

    @property
    def governs(self) -> bool:
        return self.target is not None and not self.shadowed_by


def _precedence(rule: SchedulingRule, target: str) -> tuple[int, float, str]:
    return (0 if rule.model_name == target else 1, rule.created_s, rule.id)


def govern(rules: Sequence[SchedulingRule], resolve: Resolver) -> dict[str, Governance]:
    """Governance of every rule, keyed by the rule's name."""
    by_target: dict[str, list[SchedulingRule]] = {}
    out: dict[str, Governance] = {}
    for rule in rules:
        resolution = resolve(rule.model_name)
        if resolution.model is None:
            out[rule.model_name] = Governance(None, problem=resolution.problem)
        else:
            by_target.setdefault(resolution.model, []).append(rule)
    for target, group in by_target.items():
        winner = min(group, key=lambda r: _precedence(r, target))
        for rule in group:
            out[rule.model_name] = Governance(target, "" if rule is winner else winner.model_name)
    return out


def governing_rule(model: str, rules: Sequence[SchedulingRule], resolve: Resolver) -> SchedulingRule | None:
    """The rule that decides where `model` runs, if any."""
    governance = govern(rules, resolve)
    for rule in rules:
        g = governance[rule.model_name]
        if g.governs and g.target == model:
            return rule
    return None


def conflicting_rule(name: str, rules: Sequence[SchedulingRule], resolve: Resolver) -> str | None:
    """Another rule already governing what `name` resolves to (a new or updated rule must not take it)."""
    target = resolve(name).model
    if target is None:
        return None
    for rule in sorted(rules, key=lambda r: _precedence(r, target)):
        if rule.model_name != name and resolve(rule.model_name).model == target:
            return rule.model_name
    return None
