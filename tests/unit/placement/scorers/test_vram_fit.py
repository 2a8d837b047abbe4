"""The VRAM-fit scorer: 0 when the model does not fit, 60-100 by headroom when it does, 50 when unknown."""

from __future__ import annotations

import pytest

from corral.config.sizes import GIB
from corral.placement.request import PlacementRequest
from corral.placement.scorers.vram_fit import VramFitScorer
from corral.placement.snapshot import NodeSnapshot


def score(need: int, total: int, free: int, budget: int = 0, reserved: int = 0) -> float:
    node = NodeSnapshot(
        id="n",
        name="n",
        address="",
        http_address="",
        total_vram=total,
        available_vram=free,
        vram_budget_bytes=budget,
        reserved_vram=reserved,
    )
    return VramFitScorer().score(PlacementRequest("m", vram_bytes=need), node)


def test_an_unknown_need_or_a_node_without_gpu_facts_is_neutral() -> None:
    assert score(0, 80 * GIB, 80 * GIB) == 50.0
    assert score(-1, 80 * GIB, 80 * GIB) == 50.0
    assert score(GIB, 0, 0) == 50.0


def test_a_model_that_does_not_fit_scores_zero() -> None:
    assert score(10 * GIB, 80 * GIB, 10 * GIB - 1) == 0.0


def test_an_exact_fit_scores_the_floor_of_fitting() -> None:
    assert score(10 * GIB, 80 * GIB, 10 * GIB) == 60.0


def test_more_headroom_scores_higher_up_to_100() -> None:
    assert score(GIB, 80 * GIB, 80 * GIB) == pytest.approx(60.0 + 40.0 * 79 / 80)
    assert score(1, 80 * GIB, 80 * GIB) < 100.0
    assert score(20 * GIB, 80 * GIB, 40 * GIB) < score(20 * GIB, 80 * GIB, 80 * GIB)


def test_the_budget_and_reservations_shrink_what_is_free() -> None:
    assert score(10 * GIB, 80 * GIB, 80 * GIB, budget=8 * GIB) == 0.0
    assert score(10 * GIB, 80 * GIB, 15 * GIB, reserved=6 * GIB) == 0.0
    assert score(10 * GIB, 80 * GIB, 15 * GIB, reserved=5 * GIB) == 60.0
