"""Request figures keep the `model` label bounded: configured names only, everything else is `other`."""

from __future__ import annotations

from prometheus_client import REGISTRY

from corral.telemetry.labels import RequestFigures


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
