"""staging/uploader: the retry backoff of an upload."""

from __future__ import annotations

from corral.staging.uploader import RetryPolicy


def test_retry_backoff_doubles_from_the_first_and_is_capped() -> None:
    policy = RetryPolicy(first_backoff_s=1.0, max_backoff_s=5.0)
    assert [policy.backoff_s(n) for n in range(0, 6)] == [0.0, 1.0, 2.0, 4.0, 5.0, 5.0]
