"""Cluster-aware sizing: the largest single node (capped by its VRAM budget), GPU over CPU, the union of
capabilities for backend compatibility."""

from __future__ import annotations

import pytest

from corral.placement.cluster_budget import (
    ClusterBudget,
    NodeMemory,
    capabilities,
    cluster_budget,
    compatible,
    verdict,
)

GIB = 1 << 30


def test_four_small_gpus_do_not_add_up_the_budget_is_the_largest_single_node() -> None:
    nodes = [NodeMemory(f"id{i}", f"w{i}", total_vram=16 * GIB) for i in range(4)]
    budget = cluster_budget(nodes)
    assert budget == ClusterBudget("id0", "w0", 16 * GIB, True, 4)
    assert verdict(40 * GIB, budget, 0)["fits"] is False


def test_a_gpu_node_wins_over_a_cpu_node_with_more_ram() -> None:
    nodes = [NodeMemory("c", "cpu-box", total_ram=512 * GIB), NodeMemory("g", "dgx-01", total_vram=80 * GIB)]
    assert cluster_budget(nodes) == ClusterBudget("g", "dgx-01", 80 * GIB, True, 2)


def test_a_vram_budget_caps_what_a_node_offers() -> None:
    nodes = [
        NodeMemory("a", "big-capped", total_vram=80 * GIB, vram_budget_bytes=10 * GIB),
        NodeMemory("b", "mid", total_vram=24 * GIB),
    ]
    assert cluster_budget(nodes) == ClusterBudget("b", "mid", 24 * GIB, True, 2)


def test_a_model_with_a_selector_is_sized_against_the_nodes_it_may_use() -> None:
    nodes = [
        NodeMemory("a", "gpu-big", total_vram=80 * GIB, labels={"tier": "gpu"}),
        NodeMemory("b", "cpu-small", total_ram=8 * GIB, labels={"tier": "cpu"}),
    ]
    assert cluster_budget(nodes, {"tier": "cpu"}) == ClusterBudget("b", "cpu-small", 8 * GIB, False, 2)
    assert cluster_budget(nodes, {"tier": "tpu"}) is None


@pytest.mark.parametrize(
    "need, expected",
    [
        (10 * GIB, {"fits": True, "fits_on": "dgx-01", "verdict": "Fits on dgx-01"}),
        (
            100 * GIB,
            {
                "fits": False,
                "fits_on": None,
                "verdict": "Too large: needs 107.4 GB, the largest node (dgx-01) offers 85.9 GB",
            },
        ),
        (0, {"fits": None, "fits_on": None, "verdict": "size unknown"}),
    ],
)
def test_a_verdict_names_the_node_it_belongs_to(need: int, expected: dict[str, object]) -> None:
    assert verdict(need, ClusterBudget("g", "dgx-01", 80 * GIB, True, 4), 0) == expected


def test_without_a_cluster_the_verdict_is_about_this_host() -> None:
    assert verdict(GIB, None, 2 * GIB)["verdict"] == "Fits on this host"


def test_compatibility_is_judged_against_the_union_of_cluster_capabilities() -> None:
    present = capabilities(
        [
            NodeMemory("a", "cpu"),
            NodeMemory("b", "gpu", total_vram=GIB, gpu_vendor="nvidia", capability="nvidia-cuda-12"),
        ]
    )
    assert present == {"cpu", "nvidia", "nvidia-cuda-12"}
    assert compatible("nvidia-cuda-12", present) and compatible("nvidia", present)
    assert compatible("", present) and compatible("default", present)
    assert not compatible("nvidia-cuda-13", present) and not compatible("metal", present)
    assert not compatible("nvidia", capabilities([NodeMemory("a", "cpu")]))
