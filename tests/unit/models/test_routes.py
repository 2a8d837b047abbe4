"""Model routes as pure logic: validation naming the field, the weighted choice, the fallback order, cycles."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import Any

import pytest

from corral.models.routes import (
    FALLBACKS_MAX,
    TARGETS_MAX,
    WEIGHT_MAX,
    ModelRoute,
    RouteInvalid,
    RouteTable,
    RouteTarget,
    check_references,
    find_cycle,
    parse_route,
    plan,
)

MODELS = {"big", "small", "canary", "big-alias"}


def _route(name: str, *targets: tuple[str, float], fallbacks: tuple[str, ...] = ()) -> ModelRoute:
    return ModelRoute(name, tuple(RouteTarget(m, w) for m, w in targets), fallbacks)


def _sequence(*values: float) -> Callable[[], float]:
    it = itertools.cycle(values)
    return lambda: next(it)


def test_parse_route_reads_targets_fallbacks_and_a_bare_name_as_weight_one() -> None:
    route = parse_route(
        "chat",
        {"targets": [{"model": "big", "weight": 90}, "canary"], "fallbacks": ["small"], "description": "A/B"},
    )
    assert route == ModelRoute(
        "chat", (RouteTarget("big", 90.0), RouteTarget("canary", 1.0)), ("small",), "A/B"
    )


@pytest.mark.parametrize(
    "body, field",
    [
        ([], "body"),
        ({}, "targets"),  # targets are required
        ({"targets": []}, "targets"),
        ({"targets": "big"}, "targets"),
        ({"targets": [{"model": "big"}], "colour": 1}, "colour"),
        ({"targets": [{"model": "big", "share": 3}]}, "targets[0].share"),
        ({"targets": [{"model": ""}]}, "targets[0].model"),
        ({"targets": [{"model": "a/b"}]}, "targets[0].model"),
        ({"targets": [{"model": "x" * 256}]}, "targets[0].model"),
        ({"targets": [{"model": "big", "weight": -1}]}, "targets[0].weight"),
        ({"targets": [{"model": "big", "weight": WEIGHT_MAX + 1}]}, "targets[0].weight"),
        ({"targets": [{"model": "big", "weight": "90"}]}, "targets[0].weight"),
        ({"targets": [{"model": "big", "weight": True}]}, "targets[0].weight"),
        ({"targets": [{"model": "big", "weight": float("nan")}]}, "targets[0].weight"),
        ({"targets": [{"model": "big", "weight": 0}]}, "targets"),  # weights sum to 0
        ({"targets": [{"model": "big"}, {"model": "big"}]}, "targets[1].model"),
        ({"targets": [f"m{i}" for i in range(TARGETS_MAX + 1)]}, "targets"),
        ({"targets": ["big"], "fallbacks": "small"}, "fallbacks"),
        ({"targets": ["big"], "fallbacks": [3]}, "fallbacks[0]"),
        ({"targets": ["big"], "fallbacks": ["small", "small"]}, "fallbacks[1]"),
        ({"targets": ["big"], "fallbacks": [f"m{i}" for i in range(FALLBACKS_MAX + 1)]}, "fallbacks"),
        ({"targets": ["big"], "description": 5}, "description"),
        ({"targets": ["big"], "description": "d" * 1001}, "description"),
        ({"targets": ["big"], "name": "other"}, "name"),  # the body's name must be the path's
    ],
)
def test_parse_route_refuses_each_bad_field_by_name(body: Any, field: str) -> None:
    with pytest.raises(RouteInvalid) as caught:
        parse_route("chat", body)
    assert caught.value.field == field


@pytest.mark.parametrize("name", ["", "a/b", "..", "x" * 256])
def test_parse_route_refuses_a_route_name_that_is_no_plain_name(name: str) -> None:
    with pytest.raises(RouteInvalid) as caught:
        parse_route(name, {"targets": ["big"]})
    assert caught.value.field == "name"


def test_choose_splits_by_weight_at_the_boundaries() -> None:
    route = _route("chat", ("big", 90), ("canary", 10))
    assert route.choose(lambda: 0.0) == "big"
    assert route.choose(lambda: 0.8999) == "big"
    assert route.choose(lambda: 0.9) == "canary"
    assert route.choose(lambda: 0.999999) == "canary"


def test_choose_never_picks_a_zero_weight_target() -> None:
    route = _route("chat", ("parked", 0), ("big", 3))
    assert {route.choose(_sequence(v)) for v in (0.0, 0.5, 0.99999)} == {"big"}


def test_choose_with_a_seeded_random_splits_90_10_within_three_sigma() -> None:
    route = _route("chat", ("big", 90), ("canary", 10))
    rng = random.Random(25)
    canary = sum(route.choose(rng.random) == "canary" for _ in range(10_000))
    assert abs(canary - 1000) <= 90  # 3 sigma of Binomial(10000, 0.1) is 90


def test_plan_is_the_chosen_target_then_the_fallbacks_in_order() -> None:
    routes = {"chat": _route("chat", ("big", 90), ("canary", 10), fallbacks=("small", "big"))}
    assert plan("chat", routes, lambda: 0.95) == ["canary", "small", "big"]
    assert plan("chat", routes, lambda: 0.1) == ["big", "small"]  # each name once


def test_plan_expands_routes_used_as_targets_and_fallbacks() -> None:
    routes = {
        "front": _route("front", ("inner", 1), fallbacks=("spare",)),
        "inner": _route("inner", ("big", 1), ("canary", 1), fallbacks=("small",)),
        "spare": _route("spare", ("big-alias", 1)),
    }
    assert plan("front", routes, _sequence(0.9)) == ["canary", "small", "big-alias"]


def test_plan_stops_at_a_cycle_that_slipped_into_the_table() -> None:
    routes = {"a": _route("a", ("b", 1), fallbacks=("small",)), "b": _route("b", ("a", 1))}
    assert plan("a", routes, lambda: 0.0) == ["small"]


def test_find_cycle_names_the_cycle_through_targets_or_fallbacks() -> None:
    assert find_cycle({"a": _route("a", ("big", 1))}) is None
    assert find_cycle({"a": _route("a", ("b", 1)), "b": _route("b", ("big", 1), fallbacks=("a",))}) == [
        "a",
        "b",
        "a",
    ]


def test_check_references_refuses_a_name_clash_unknown_names_self_reference_and_cycles() -> None:
    stored = {"inner": _route("inner", ("big", 1), fallbacks=("outer",))}
    cases = [
        (_route("big-alias", ("big", 1)), "name", "is a model or alias name"),
        (_route("chat", ("big", 1), ("nope", 1)), "targets[1].model", "'nope' is neither"),
        (_route("chat", ("big", 1), fallbacks=("nope",)), "fallbacks[0]", "'nope' is neither"),
        (_route("chat", ("chat", 1)), "targets[0].model", "cannot lead to itself"),
        (_route("outer", ("inner", 1)), "targets", "cycle: inner -> outer -> inner"),
    ]
    for route, field, words in cases:
        with pytest.raises(RouteInvalid) as caught:
            check_references(route, {**stored, "outer": _route("outer", ("big", 1))}, MODELS)
        assert caught.value.field == field, route
        assert words in str(caught.value)
    check_references(_route("chat", ("inner", 1), fallbacks=("small",)), stored, MODELS)  # fine


def test_route_table_picks_for_routes_and_leaves_other_names() -> None:
    table = RouteTable({"chat": _route("chat", ("big", 1), ("canary", 1))}, rand=lambda: 0.75)
    assert table.pick("chat") == "canary"
    assert table.pick("big") == "big"
    assert table.plan("big") is None
    table.replace({})
    assert table.pick("chat") == "chat"
