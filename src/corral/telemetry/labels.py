"""Label children bound once and cached, so recording a figure on the warm path is one dict lookup
and one increment: no label dict is built per request (prometheus_client's `labels()` costs ~2 µs).

The increments are bound too: a counter child's value (`inc_of`) and a histogram child's sum and buckets
(`observe_of`), what prometheus_client 0.26's `Counter.inc` and `Histogram.observe` reach after their checks
(the child is observable once bound; a count of 1 and a duration are never negative): one Python call for a
count, three for a duration, instead of three and four plus a loop over the buckets. The same samples, which
tests/unit/telemetry/test_labels.py compares with the public calls' (a prometheus_client upgrade is checked
there).

Cardinality stays bounded: a child is cached only for a configured model (an unknown name is
counted under `other` and never becomes a key), and the caches stop growing at a fixed size.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from typing import Any

from prometheus_client.metrics import MetricWrapperBase

from corral.telemetry.families import OTHER_MODEL, REQUEST_SECONDS, REQUESTS

MAX_CACHED = 4096  # (model, status) pairs or models; past it, children are looked up (still bounded labels)


def inc_of(child: Any) -> Callable[[float], None]:
    """`child.inc` of a counter child, without its checks (see above)."""
    return child._value.inc  # type: ignore[no-any-return]


def observe_of(child: Any) -> Callable[[float], None]:
    """`child.observe` of a histogram child, without its checks and its loop (see above)."""
    add_sum, bounds = child._sum.inc, child._upper_bounds
    counts = [
        bucket.inc for bucket in child._buckets
    ]  # the last bound is +Inf: every duration has its bucket

    def observe(amount: float) -> None:
        add_sum(amount)
        counts[bisect_left(bounds, amount)](1)

    return observe


class RequestFigures:
    """`corral_requests_total` and `corral_request_duration_seconds` for one finished request."""

    def __init__(self, configured_name: Callable[[str], str | None]) -> None:
        self._configured_name = configured_name  # requested model (or alias) → configured name, else None
        self._pairs: dict[tuple[str, int], tuple[Callable[[float], None], Callable[[float], None]]] = {}

    def observe(self, model: str, status: int, seconds: float) -> None:
        pair = self._pairs.get((model, status))
        if pair is None:
            pair = self._bind(model, status)
        pair[0](1)
        pair[1](seconds)

    def _bind(self, model: str, status: int) -> tuple[Callable[[float], None], Callable[[float], None]]:
        name = self._configured_name(model)
        label, code = name or OTHER_MODEL, str(status)
        pair = (inc_of(REQUESTS.labels(label, code)), observe_of(REQUEST_SECONDS.labels(label, code)))
        if name is not None and len(self._pairs) < MAX_CACHED:
            self._pairs[(model, status)] = pair
        return pair


class PerModel:
    """The children of one family for each configured model (`model` first, then `fixed` labels)."""

    def __init__(self, family: MetricWrapperBase, *fixed: str) -> None:
        self.family, self.fixed = family, fixed
        self._children: dict[str, Any] = {}
        self._incs: dict[str, Callable[[float], None]] = {}

    def __call__(self, model: str) -> Any:
        child = self._children.get(model)
        if child is None:
            child = self.family.labels(model, *self.fixed)
            if len(self._children) < MAX_CACHED:
                self._children[model] = child
        return child

    def count(self, model: str) -> None:
        """`self(model).inc()` of a counter family, through its bound increment."""
        inc = self._incs.get(model)
        if inc is None:
            inc = inc_of(self(model))
            if len(self._incs) < MAX_CACHED:
                self._incs[model] = inc
        inc(1)
