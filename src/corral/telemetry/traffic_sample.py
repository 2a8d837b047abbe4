"""One interval's traffic figures of one model, as a frontend samples them and every frontend merges them.

Counts (requests, errors, tokens, loads, evictions) are what happened in the interval; `in_flight` and
`queued` are gauges read at its end. Latency and time to first token travel as the counts of the
Prometheus histograms' own buckets (`families.LATENCY_BUCKETS_S` and +Inf) observed in the interval, so
samples of several frontends merge exactly by adding counts, and p50/p95 come out of the merged counts the
way PromQL's `histogram_quantile` computes them from the same families: the Dashboard and a Grafana
panel over `/metrics` agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from corral.telemetry.families import LATENCY_BUCKETS_S

BUCKETS = len(LATENCY_BUCKETS_S) + 1  # the finite upper bounds, then +Inf
COUNT_FIELDS = ("requests", "errors", "tokens_in", "tokens_out", "in_flight", "queued", "loads", "evictions")
MODELS_MAX = 1000  # per sample message: a bound on what one (possibly hostile) message may make us keep
MODEL_NAME_MAX = 255


def empty_buckets() -> list[int]:
    return [0] * BUCKETS


@dataclass
class ModelSample:
    requests: int = 0
    errors: int = 0  # answered 5xx or 429
    tokens_in: int = 0  # prompt tokens, as the engines counted them
    tokens_out: int = 0  # completion tokens
    in_flight: int = 0
    queued: int = 0
    loads: int = 0  # load jobs that ended (any outcome)
    evictions: int = 0
    latency: list[int] = field(default_factory=empty_buckets)  # per-bucket counts (not cumulative)
    ttft: list[int] = field(default_factory=empty_buckets)

    def add(self, other: ModelSample) -> None:
        """Merge `other` (another frontend's, or another model's for the cluster) into this one."""
        for name in COUNT_FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.latency = [a + b for a, b in zip(self.latency, other.latency, strict=True)]
        self.ttft = [a + b for a, b in zip(self.ttft, other.ttft, strict=True)]

    def is_empty(self) -> bool:
        return (
            not any(getattr(self, name) for name in COUNT_FIELDS)
            and not any(self.latency)
            and not any(self.ttft)
        )

    def to_json(self) -> list[object]:
        return [*(getattr(self, name) for name in COUNT_FIELDS), _sparse(self.latency), _sparse(self.ttft)]

    @classmethod
    def from_json(cls, raw: object) -> ModelSample:
        """Raises ValueError on anything but what `to_json` makes."""
        if not isinstance(raw, list) or len(raw) != len(COUNT_FIELDS) + 2:
            raise ValueError("a model sample is a list of 10 items")
        counts = [_count(v) for v in raw[: len(COUNT_FIELDS)]]
        return cls.of(counts, _dense(raw[-2]), _dense(raw[-1]))

    @classmethod
    def of(cls, counts: Sequence[int], latency: list[int], ttft: list[int]) -> ModelSample:
        """A sample from its counts in COUNT_FIELDS' order and its histogram counts."""
        sample = cls(latency=latency, ttft=ttft)
        for name, value in zip(COUNT_FIELDS, counts, strict=True):
            setattr(sample, name, value)
        return sample


def _count(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"count {value!r} is not a non-negative integer")
    return value


def _sparse(counts: list[int]) -> list[list[int]]:
    """Non-zero buckets only, as [index, count]: most intervals see a few buckets of 18."""
    return [[i, n] for i, n in enumerate(counts) if n]


def _dense(raw: object) -> list[int]:
    if not isinstance(raw, list) or len(raw) > BUCKETS:
        raise ValueError("histogram counts are a list of [bucket, count]")
    counts = empty_buckets()
    for pair in raw:
        if not isinstance(pair, list) or len(pair) != 2:
            raise ValueError("histogram counts are a list of [bucket, count]")
        index, count = _count(pair[0]), _count(pair[1])
        if index >= BUCKETS:
            raise ValueError(f"histogram bucket {index} out of range")
        counts[index] += count
    return counts


def merged(samples: Iterable[ModelSample]) -> ModelSample:
    total = ModelSample()
    for sample in samples:
        total.add(sample)
    return total


def quantile_s(
    q: float, counts: Sequence[int], bounds_s: Sequence[float] = LATENCY_BUCKETS_S
) -> float | None:
    """The q-quantile of per-bucket `counts` over upper `bounds_s` (+Inf last), as PromQL's `histogram_quantile`:
    linear within the bucket it falls in (from 0 for the first), the highest finite bound when it falls in +Inf.
    None with no observation."""
    total = sum(counts)
    if total == 0:
        return None
    rank, seen = q * total, 0
    for index, count in enumerate(counts):
        if count and seen + count >= rank:
            if index >= len(bounds_s):
                return bounds_s[-1]
            lower = bounds_s[index - 1] if index else 0.0
            return lower + (bounds_s[index] - lower) * (rank - seen) / count
        seen += count
    return bounds_s[-1]


@dataclass
class FrontendSample:
    """What one frontend publishes each interval (`telemetry.traffic.sample`)."""

    frontend: str
    bucket: int  # the interval's number: its start is bucket × interval_s (unix seconds)
    interval_s: float
    models: dict[str, ModelSample]

    def to_json(self) -> dict[str, object]:
        return {
            "frontend": self.frontend,
            "bucket": self.bucket,
            "interval_s": self.interval_s,
            "models": {m: s.to_json() for m, s in self.models.items()},
        }

    @classmethod
    def from_json(cls, raw: object) -> FrontendSample:
        """Raises ValueError on a malformed or oversized message."""
        if not isinstance(raw, dict):
            raise ValueError("a traffic sample is an object")
        frontend, bucket, interval_s, models = (
            raw.get(k) for k in ("frontend", "bucket", "interval_s", "models")
        )
        if not isinstance(frontend, str) or not frontend:
            raise ValueError("frontend must be a non-empty string")
        if not isinstance(interval_s, int | float) or isinstance(interval_s, bool) or interval_s <= 0:
            raise ValueError("interval_s must be a positive number")
        if not isinstance(models, dict) or len(models) > MODELS_MAX:
            raise ValueError(f"models must be an object of at most {MODELS_MAX} models")
        out = {}
        for model, sample in models.items():
            if not isinstance(model, str) or len(model) > MODEL_NAME_MAX:
                raise ValueError("model names are strings of at most 255 characters")
            out[model] = ModelSample.from_json(sample)
        return cls(frontend, _count(bucket), float(interval_s), out)
