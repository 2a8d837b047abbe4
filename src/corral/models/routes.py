"""Model routes: a name clients send as `model`, served by weighted targets with ordered fallbacks (issue 25).

A route splits its traffic between targets by weight (a canary: 90/10 between two models or two configs
of one) and names fallbacks, tried in order when the chosen target cannot serve (no capacity, or a failure
before the first byte). A target or fallback is a model, an alias or another route; routes never form a
cycle. Pure: validation, the weighted choice (random injected) and the order of candidates.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from corral.models.names import NAME_MAX_CHARS, name_problem

TARGETS_MAX = 16  # weighted targets of one route: an A/B/n split, not a fleet list
FALLBACKS_MAX = 8  # fallbacks of one route, tried in order
WEIGHT_MAX = 1_000_000  # a weight is relative: 90/10 and 900000/100000 split alike
DESCRIPTION_MAX = 1000
FIELDS = ("name", "targets", "fallbacks", "description")
TARGET_FIELDS = ("model", "weight")

Random = Callable[[], float]  # uniform in [0, 1), as random.random


class RouteInvalid(ValueError):
    """A route field is wrong; `field` names it and the message says what to send instead."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"field '{field}': {message}")
        self.field = field


@dataclass(frozen=True)
class RouteTarget:
    model: str  # a model, an alias or a route
    weight: float


@dataclass(frozen=True)
class ModelRoute:
    name: str
    targets: tuple[RouteTarget, ...]
    fallbacks: tuple[str, ...] = ()
    description: str = ""
    updated_s: float = field(default=0.0, compare=False)

    @property
    def total_weight(self) -> float:
        return sum(t.weight for t in self.targets)

    def choose(self, rand: Random) -> str:
        """One target, each with probability weight / total (a zero weight is never chosen)."""
        point = rand() * self.total_weight
        reached = 0.0
        for target in self.targets:
            reached += target.weight
            if target.weight > 0 and point < reached:
                return target.model
        return next(t.model for t in reversed(self.targets) if t.weight > 0)  # rounding at the top end

    def references(self) -> Iterator[str]:
        """Every name it leads to: targets, then fallbacks."""
        yield from (t.model for t in self.targets)
        yield from self.fallbacks

    def to_json(self) -> dict[str, Any]:
        return {
            "targets": [{"model": t.model, "weight": t.weight} for t in self.targets],
            "fallbacks": list(self.fallbacks),
            "description": self.description,
        }


def _shown(value: Any) -> str:
    """A refused value as quoted in a message: its repr, cut to 64 characters."""
    text = repr(value)
    return text if len(text) <= 64 else f"{text[:64]}…"


def _name(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise RouteInvalid(key, f"must be a model, alias or route name, got {_shown(value)}")
    problem = name_problem(value.strip())
    if problem is not None:
        raise RouteInvalid(key, problem)
    return value.strip()


def _weight(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RouteInvalid(key, f"must be a number from 0 to {WEIGHT_MAX}, got {_shown(value)}")
    if not 0 <= value <= WEIGHT_MAX:
        raise RouteInvalid(key, f"must be between 0 and {WEIGHT_MAX}, got {_shown(value)}")
    return float(value)


def _targets(raw: Any) -> tuple[RouteTarget, ...]:
    if not isinstance(raw, list) or not raw:
        raise RouteInvalid(
            "targets",
            'is required: a list like [{"model": "llama3", "weight": 90}, {"model": "llama3-canary", "weight": 10}]',
        )
    if len(raw) > TARGETS_MAX:
        raise RouteInvalid("targets", f"at most {TARGETS_MAX} targets, got {len(raw)}")
    targets: list[RouteTarget] = []
    for i, item in enumerate(raw):
        key = f"targets[{i}]"
        if isinstance(item, str):
            item = {"model": item}  # a bare name: weight 1
        if not isinstance(item, dict):
            raise RouteInvalid(
                key, f'must be an object like {{"model": "llama3", "weight": 90}}, got {_shown(item)}'
            )
        unknown = sorted(k for k in item if k not in TARGET_FIELDS)
        if unknown:
            raise RouteInvalid(
                f"{key}.{unknown[0]}", f"unknown field; known fields: {', '.join(TARGET_FIELDS)}"
            )
        model = _name(item.get("model"), f"{key}.model")
        if any(t.model == model for t in targets):
            raise RouteInvalid(
                f"{key}.model", f"{model!r} is listed twice; give it one target with the summed weight"
            )
        targets.append(RouteTarget(model, _weight(item.get("weight", 1), f"{key}.weight")))
    if sum(t.weight for t in targets) <= 0:
        raise RouteInvalid("targets", "the weights sum to 0; give at least one target a positive weight")
    return tuple(targets)


def _fallbacks(raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise RouteInvalid("fallbacks", f'must be a list of names like ["llama3-small"], got {_shown(raw)}')
    if len(raw) > FALLBACKS_MAX:
        raise RouteInvalid("fallbacks", f"at most {FALLBACKS_MAX} fallbacks, got {len(raw)}")
    names: list[str] = []
    for i, item in enumerate(raw):
        name = _name(item, f"fallbacks[{i}]")
        if name in names:
            raise RouteInvalid(f"fallbacks[{i}]", f"{name!r} is listed twice")
        names.append(name)
    return tuple(names)


def parse_route(name: str, body: Any) -> ModelRoute:
    """Validate an API body for route `name` (its shape only; `check_references` checks the names it uses)."""
    route_name = _name(name, "name")
    if len(route_name) > NAME_MAX_CHARS:  # name_problem says so too; kept for the message's field
        raise RouteInvalid("name", f"must be at most {NAME_MAX_CHARS} characters")
    if not isinstance(body, dict):
        raise RouteInvalid("body", 'must be an object like {"targets": [{"model": "llama3", "weight": 1}]}')
    unknown = sorted(k for k in body if k not in FIELDS)
    if unknown:
        raise RouteInvalid(str(unknown[0])[:64], f"unknown field; known fields: {', '.join(FIELDS)}")
    if "name" in body and body["name"] != route_name:
        raise RouteInvalid(
            "name", f"is {_shown(body['name'])} but the path names {route_name!r}; send one name"
        )
    description = body.get("description", "")
    if not isinstance(description, str):
        raise RouteInvalid("description", f"must be a string, got {_shown(description)}")
    if len(description) > DESCRIPTION_MAX:
        raise RouteInvalid(
            "description", f"must be at most {DESCRIPTION_MAX} characters, got {len(description)}"
        )
    targets = _targets(body.get("targets"))
    return ModelRoute(route_name, targets, _fallbacks(body.get("fallbacks")), description)


def find_cycle(routes: Mapping[str, ModelRoute]) -> list[str] | None:
    """A cycle among routes (through targets or fallbacks), as names from its first route back to it."""
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str] | None:
        if name in path:
            return [*path[path.index(name) :], name]
        if name in done or name not in routes:
            return None
        for ref in routes[name].references():
            cycle = visit(ref, [*path, name])
            if cycle is not None:
                return cycle
        done.add(name)
        return None

    for name in sorted(routes):
        cycle = visit(name, [])
        if cycle is not None:
            return cycle
    return None


def check_references(route: ModelRoute, routes: Mapping[str, ModelRoute], models: Collection[str]) -> None:
    """`route` may join `routes` (the others, as stored): its name is no model's or alias's (`models` holds
    both), each name it uses is a model, alias or route, and no cycle follows. RouteInvalid names the field."""
    if route.name in models:
        raise RouteInvalid(
            "name", f"{route.name!r} is a model or alias name; a route needs a name of its own"
        )
    others = {**routes, route.name: route}
    fields = [(f"targets[{i}].model", t.model) for i, t in enumerate(route.targets)]
    fields += [(f"fallbacks[{i}]", name) for i, name in enumerate(route.fallbacks)]
    for key, name in fields:
        if name == route.name:
            raise RouteInvalid(key, f"route {route.name!r} cannot lead to itself")
        if name not in models and name not in others:
            raise RouteInvalid(key, f"{name!r} is neither a model, an alias nor a route")
    cycle = find_cycle(others)
    if cycle is not None:
        raise RouteInvalid("targets", f"routes would form a cycle: {' -> '.join(cycle)}")


def plan(name: str, routes: Mapping[str, ModelRoute], rand: Random) -> list[str]:
    """The names (models or aliases) to try for a request to route `name`, in order: the chosen target
    (a route target expands to its own plan), then each fallback (expanded likewise). Each name once."""
    order: list[str] = []

    def expand(current: str, seen: frozenset[str]) -> None:
        route = routes.get(current)
        if route is None:
            if current not in order:
                order.append(current)
            return
        if current in seen:  # a cycle slipped past the checks (tables edited concurrently): stop here
            return
        inner = seen | {current}
        expand(route.choose(rand), inner)
        for fallback in route.fallbacks:
            expand(fallback, inner)

    expand(name, frozenset())
    return order


class RouteTable:
    """This process's routes, replaced whole on each refresh (route_sync); read on the request path."""

    def __init__(self, routes: Mapping[str, ModelRoute] | None = None, rand: Random = random.random) -> None:
        self.routes: dict[str, ModelRoute] = dict(routes or {})
        self.rand = rand

    def replace(self, routes: Mapping[str, ModelRoute]) -> None:
        self.routes = dict(routes)

    def plan(self, name: str) -> list[str] | None:
        """The candidates for a request naming route `name`; None when `name` is no route."""
        if name not in self.routes:
            return None
        return plan(name, self.routes, self.rand)

    def pick(self, name: str) -> str:
        """`name` itself, or for a route its chosen target's model (where fallbacks are not tried)."""
        if not self.routes or name not in self.routes:
            return name
        candidates = plan(name, self.routes, self.rand)
        return candidates[0] if candidates else name
