"""Traffic samples: counts and histogram buckets merge by adding, p50/p95 come out as PromQL's histogram_quantile
would compute them, and a message from the network is checked before anything of it is kept."""

from __future__ import annotations

import json

import pytest

from corral.telemetry.families import LATENCY_BUCKETS_S
from corral.telemetry.traffic_sample import (
    BUCKETS,
    FrontendSample,
    ModelSample,
    empty_buckets,
    merged,
    quantile_s,
)


def _buckets(**at: int) -> list[int]:
    """Per-bucket counts by upper bound in ms, e.g. _buckets(ms100=3)."""
    counts = empty_buckets()
    for key, n in at.items():
        counts[LATENCY_BUCKETS_S.index(float(key[2:]) / 1000)] = n
    return counts


def test_quantile_interpolates_within_the_bucket_it_falls_in_like_histogram_quantile() -> None:
    counts = _buckets(ms50=10, ms100=10)  # 10 in (25, 50] ms, 10 in (50, 100] ms
    assert quantile_s(0.5, counts) == pytest.approx(0.05)  # the 10th of 20: the top of (25, 50]
    assert quantile_s(0.95, counts) == pytest.approx(0.05 + 0.05 * 9 / 10)  # 19th: 9 of 10 into (50, 100]


def test_quantile_of_the_first_bucket_starts_at_zero_and_of_inf_is_the_highest_bound() -> None:
    first = empty_buckets()
    first[0] = 4
    assert quantile_s(0.5, first) == pytest.approx(0.0005)
    slow = empty_buckets()
    slow[BUCKETS - 1] = 3  # over 300 s
    assert quantile_s(0.95, slow) == LATENCY_BUCKETS_S[-1]


def test_quantile_without_observations_is_none() -> None:
    assert quantile_s(0.5, empty_buckets()) is None


def test_merging_two_frontends_samples_gives_the_quantiles_of_all_their_requests() -> None:
    fast = ModelSample(requests=10, latency=_buckets(ms10=10))
    slow = ModelSample(requests=10, errors=1, latency=_buckets(ms1000=10))
    both = merged([fast, slow])
    assert (both.requests, both.errors) == (20, 1)
    assert both.latency == _buckets(ms10=10, ms1000=10)
    assert quantile_s(0.95, both.latency) == pytest.approx(0.5 + 0.5 * 9 / 10)
    assert fast.latency == _buckets(ms10=10)  # the inputs are not changed


def test_a_frontend_sample_survives_its_json_round_trip() -> None:
    sample = FrontendSample(
        "fe-1",
        360_000,
        5.0,
        {"m": ModelSample(3, 1, 30, 90, 2, 1, 1, 0, latency=_buckets(ms25=3), ttft=_buckets(ms10=2))},
    )
    assert FrontendSample.from_json(json.loads(json.dumps(sample.to_json()))) == sample


@pytest.mark.parametrize(
    "body, reason",
    [
        ([], "not an object"),
        ({"frontend": "", "bucket": 1, "interval_s": 5, "models": {}}, "empty frontend"),
        ({"frontend": "a", "bucket": -1, "interval_s": 5, "models": {}}, "negative bucket"),
        ({"frontend": "a", "bucket": 1, "interval_s": 0, "models": {}}, "interval 0"),
        ({"frontend": "a", "bucket": 1, "interval_s": 5, "models": {"m": [1, 2]}}, "short model sample"),
        (
            {
                "frontend": "a",
                "bucket": 1,
                "interval_s": 5,
                "models": {"m": [-1, 0, 0, 0, 0, 0, 0, 0, [], []]},
            },
            "neg",
        ),
        (
            {
                "frontend": "a",
                "bucket": 1,
                "interval_s": 5,
                "models": {"m": [1, 0, 0, 0, 0, 0, 0, 0, [[99, 1]], []]},
            },
            "bucket",
        ),
        (
            {"frontend": "a", "bucket": 1, "interval_s": 5, "models": {"x" * 256: [0] * 8 + [[], []]}},
            "long name",
        ),
        (
            {
                "frontend": "a",
                "bucket": 1,
                "interval_s": 5,
                "models": {str(i): [0] * 8 + [[], []] for i in range(1001)},
            },
            "many",
        ),
    ],
)
def test_a_malformed_or_oversized_sample_is_refused(body: object, reason: str) -> None:
    with pytest.raises(ValueError):
        FrontendSample.from_json(body)
