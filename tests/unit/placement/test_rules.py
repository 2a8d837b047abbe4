"""Scheduling rule validation (reference §4.3): every wrong field is named with its fix."""

from __future__ import annotations

from typing import Any

import pytest

from corral.placement.rules import RuleInvalid, RuleSpec, parse_rule


@pytest.mark.parametrize(
    "body, field, text",
    [
        ({}, "model_name", "is required"),
        ({"model_name": "  "}, "model_name", "is required"),
        ({"model_name": 7}, "model_name", "is required"),
        ({"model_name": "m" * 256}, "model_name", "at most 255"),
        ({"model_name": "m", "min_replicas": -1}, "min_replicas", "between 0 and"),
        ({"model_name": "m", "min_replicas": True}, "min_replicas", "whole number"),
        ({"model_name": "m", "max_replicas": "2"}, "max_replicas", "whole number"),
        (
            {"model_name": "m", "min_replicas": 3, "max_replicas": 2},
            "min_replicas",
            "must not exceed max_replicas (3 > 2)",
        ),
        ({"model_name": "m", "replicas": "all", "min_replicas": 1}, "min_replicas", "mutually exclusive"),
        ({"model_name": "m", "spread_all": True, "max_replicas": 2}, "max_replicas", "mutually exclusive"),
        ({"model_name": "m", "replicas": "some"}, "replicas", 'must be "all"'),
        ({"model_name": "m", "spread_all": "yes"}, "spread_all", "true or false"),
        (
            {"model_name": "m", "route_policy": "fastest"},
            "route_policy",
            "round_robin, least_loaded, prefix_cache, power_of_two; got 'fastest'",
        ),
        ({"model_name": "m", "balance_abs_threshold": -1}, "balance_abs_threshold", "between 0"),
        (
            {"model_name": "m", "balance_rel_threshold": 0.5},
            "balance_rel_threshold",
            "0 (inherit) or at least 1",
        ),
        ({"model_name": "m", "min_prefix_match": 1.5}, "min_prefix_match", "between 0 and 1"),
        ({"model_name": "m", "min_prefix_match": "high"}, "min_prefix_match", "must be a number"),
        ({"model_name": "m", "node_selector": "gpu"}, "node_selector", "object of label"),
        ({"model_name": "m", "node_selector": {"zone": ["a"]}}, "node_selector.zone", "string label value"),
        ({"model_name": "m", "node_selector": {"": "x"}}, "node_selector", "1-128 characters"),
        ({"model_name": "m", "min_replica": 1}, "min_replica", "unknown field"),  # a typo is not ignored
    ],
)
def test_each_invalid_field_is_named(body: dict[str, Any], field: str, text: str) -> None:
    with pytest.raises(RuleInvalid) as caught:
        parse_rule(body)
    assert caught.value.field == field
    assert text in str(caught.value)
    assert str(caught.value).startswith(f"field '{field}': ")


def test_a_body_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(RuleInvalid, match="must be an object"):
        parse_rule(["m"])


@pytest.mark.parametrize(
    "replicas, spread",
    [("all", True), ("ALL", True), (True, True), ("auto", False), ("", False), (False, False), (None, False)],
)
def test_replicas_all_means_static_spread(replicas: object, spread: bool) -> None:
    assert parse_rule({"model_name": "m", "replicas": replicas}).spread_all is spread


def test_a_valid_rule_keeps_every_field() -> None:
    spec = parse_rule(
        {
            "model_name": " llama3 ",
            "node_selector": {"gpu.vendor": "nvidia", "!draining": None, "slots": 2},
            "min_replicas": 2,
            "max_replicas": 4,
            "route_policy": "prefix_cache",
            "balance_abs_threshold": 3,
            "balance_rel_threshold": 1.5,
            "min_prefix_match": 0.25,
        }
    )
    assert spec == RuleSpec(
        model_name="llama3",
        node_selector={"gpu.vendor": "nvidia", "!draining": "", "slots": "2"},
        min_replicas=2,
        max_replicas=4,
        route_policy="prefix_cache",
        balance_abs_threshold=3,
        balance_rel_threshold=1.5,
        min_prefix_match=0.25,
    )


def test_max_zero_means_no_upper_bound_so_any_minimum_is_valid() -> None:
    assert parse_rule({"model_name": "m", "min_replicas": 5, "max_replicas": 0}).min_replicas == 5


def test_api_updates_keep_routing_overrides_that_are_not_sent() -> None:
    spec = parse_rule({"model_name": "m", "min_replicas": 1})
    assert (
        spec.route_policy,
        spec.balance_abs_threshold,
        spec.balance_rel_threshold,
        spec.min_prefix_match,
    ) == (None, None, None, None)


def test_a_declarative_entry_replaces_the_whole_rule_including_routing_overrides() -> None:
    spec = parse_rule({"model_name": "m", "replicas": "all"}, declarative=True)
    assert (
        spec.route_policy,
        spec.balance_abs_threshold,
        spec.balance_rel_threshold,
        spec.min_prefix_match,
    ) == ("", 0, 0.0, 0.0)


def test_a_declarative_entry_with_only_max_replicas_zero_does_nothing_and_is_refused() -> None:
    with pytest.raises(RuleInvalid) as caught:
        parse_rule({"model_name": "whisper", "max_replicas": 0}, declarative=True)
    assert caught.value.field == "max_replicas"
    assert "does nothing" in str(caught.value)
    assert parse_rule({"model_name": "whisper", "max_replicas": 0}).max_replicas == 0  # the API allows it
    assert parse_rule({"model_name": "whisper", "min_replicas": 1, "max_replicas": 0}, declarative=True)
