from __future__ import annotations

import pytest

from corral.placement.vram_budget import BadVramBudget, budget_bytes, parse_budget

GIB = 1 << 30


@pytest.mark.parametrize(
    "raw, total, ceiling",
    [
        ("80%", 10 * GIB, 8 * GIB),
        ("12GB", 80 * GIB, 12 * 1000**3),  # decimal
        ("12GiB", 80 * GIB, 12 * GIB),  # binary
        ("12000MB", 80 * GIB, 12 * 1000**3),
        ("12gib", 80 * GIB, 12 * GIB),  # case-insensitive
        (str(5 * GIB), 80 * GIB, 5 * GIB),  # raw bytes
        ("0.5", 10 * GIB, 5 * GIB),  # a fraction
        ("100GiB", 24 * GIB, 24 * GIB),  # a budget never raises what the hardware has
        ("0%", 24 * GIB, 0),  # 0 % = no cap
        ("", 24 * GIB, 0),
    ],
)
def test_budgets_resolve_to_a_ceiling_no_higher_than_the_hardware(raw: str, total: int, ceiling: int) -> None:
    assert budget_bytes(raw, total) == ceiling


@pytest.mark.parametrize("raw", ["lots", "120%", "-5GB", "12 parsecs", "%"])
def test_bad_budgets_name_the_value_and_the_accepted_forms(raw: str) -> None:
    with pytest.raises(BadVramBudget) as info:
        parse_budget(raw)
    assert repr(raw) in str(info.value)
