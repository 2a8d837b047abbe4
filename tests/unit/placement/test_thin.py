from __future__ import annotations

import pytest

from corral.placement.errors import NoNodeAvailable
from corral.placement.snapshot import NodeSnapshot
from corral.placement.thin import pick_node


def node(name: str, loaded: int = 0, in_flight: int = 0, models: tuple[str, ...] = ()) -> NodeSnapshot:
    return NodeSnapshot(id=name, name=name, address=f"{name}:1", http_address=f"{name}:0", loaded_models=loaded,
                        in_flight=in_flight, model_names=frozenset(models))


def test_a_node_that_already_has_the_model_wins() -> None:
    assert pick_node([node("a"), node("b", loaded=1, models=("m",))], "m").name == "b"


def test_an_idle_node_wins_over_a_busy_one() -> None:
    assert pick_node([node("a", loaded=1, models=("x",)), node("b")], "m").name == "b"


def test_without_idle_nodes_the_least_loaded_wins() -> None:
    nodes = [node("a", loaded=1, in_flight=3, models=("x",)), node("b", loaded=2, in_flight=1, models=("y", "z"))]
    assert pick_node(nodes, "m").name == "b"


def test_no_nodes_is_an_error_that_says_what_to_do() -> None:
    with pytest.raises(NoNodeAvailable, match="start `corral worker"):
        pick_node([], "m")
