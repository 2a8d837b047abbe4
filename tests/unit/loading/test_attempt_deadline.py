from __future__ import annotations

import pytest

from corral.loading.attempt_deadline import GIB, deadline_message, load_budget_s


@pytest.mark.parametrize(
    "size_bytes, budget_s",
    [
        (0, 300.0),  # no local files ⇒ 5m
        (GIB, 320.0),
        (70 * GIB, 300.0 + 1400.0),  # 70 GiB ⇒ 28m20s
        (2000 * GIB, 6 * 3600.0),  # capped at 6h
    ],
)
def test_load_budget_scales_with_the_checkpoint(size_bytes: int, budget_s: float) -> None:
    assert load_budget_s(size_bytes) == pytest.approx(budget_s)


def test_an_explicit_timeout_is_used_verbatim() -> None:
    assert load_budget_s(70 * GIB, 42.0) == 42.0


def test_deadline_message_names_budget_size_and_knob() -> None:
    text = deadline_message("big", load_budget_s(70 * GIB), 70 * GIB, overridden=False)
    assert "28m20s" in text and "70.0 GiB" in text and "LOCALAI_NATS_MODEL_LOAD_TIMEOUT" in text
