"""Backoff of failed backend intents (reference §2.8): 30 s × 2^(n-1), capped at 15 min."""

from __future__ import annotations

from corral.nodes.backend_ops import retry_delay_s


def test_backoff_doubles_from_30s_and_caps_at_15min() -> None:
    assert [retry_delay_s(n) for n in (1, 2, 3, 5, 6, 9)] == [30, 60, 120, 480, 900, 900]
