"""Request figures keep the `model` label bounded: configured names only, everything else is `other`; their
bound increments record what prometheus_client's public calls record."""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

from corral.telemetry.labels import RequestFigures, inc_of, observe_of


def _count(model: str, status: str) -> float:
    return REGISTRY.get_sample_value("corral_requests_total", {"model": model, "status": status}) or 0.0


def test_unknown_models_count_as_other_and_are_never_cached() -> None:
    figures = RequestFigures(lambda name: "known-model" if name in ("known-model", "its-alias") else None)
    before_known, before_other = _count("known-model", "200"), _count("other", "404")
    figures.observe("known-model", 200, 0.01)
    figures.observe("its-alias", 200, 0.01)  # an alias counts under the model it names
    for i in range(50):
        figures.observe(f"made-up-{i}", 404, 0.001)
    assert _count("known-model", "200") - before_known == 2
    assert _count("other", "404") - before_other == 50
    assert REGISTRY.get_sample_value("corral_requests_total", {"model": "made-up-1", "status": "404"}) is None
    assert len(figures._pairs) == 2


def _samples(family: Counter | Histogram) -> list[tuple[str, dict[str, str], float]]:
    return [
        (sample.name.split("_", 1)[1], sample.labels, sample.value)
        for metric in family.collect()
        for sample in metric.samples
        if not sample.name.endswith("_created")
    ]


def test_the_bound_increments_record_what_the_public_calls_record() -> None:
    """inc_of and observe_of reach prometheus_client's values past its checks: the same samples (this fails on a
    prometheus_client whose children keep their values elsewhere)."""
    registry = CollectorRegistry()
    buckets = (0.001, 0.01, 0.1, 1.0, 10.0)
    public = Histogram("a_seconds", "public", ["model"], buckets=buckets, registry=registry)
    bound = Histogram("b_seconds", "bound", ["model"], buckets=buckets, registry=registry)
    counted = Counter("a_total", "public", ["model"], registry=registry)
    fast = Counter("b_total", "bound", ["model"], registry=registry)
    observe, inc = observe_of(bound.labels("m")), inc_of(fast.labels("m"))
    for amount in (0.0, 0.0005, 0.001, 0.0011, 0.01, 0.5, 1.0, 9.99, 10.0, 10.5, 1e9):
        public.labels("m").observe(amount)
        observe(amount)
        counted.labels("m").inc()
        inc(1)
    assert _samples(bound) == _samples(public)
    assert _samples(fast) == _samples(counted)
    assert _samples(fast)[0][2] == 11
