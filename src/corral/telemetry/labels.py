"""Label children bound once and cached, so recording a figure on the warm path is one dict lookup
and one increment: no label dict is built per request (prometheus_client's `labels()` costs ~2 µs).

Cardinality stays bounded: a child is cached only for a configured model (an unknown name is
counted under `other` and never becomes a key), and the caches stop growing at a fixed size.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client.metrics import MetricWrapperBase

from corral.telemetry.families import OTHER_MODEL, REQUEST_SECONDS, REQUESTS

MAX_CACHED = 4096  # (model, status) pairs or models; past it, children are looked up (still bounded labels)


class RequestFigures:
    """`corral_requests_total` and `corral_request_duration_seconds` for one finished request."""

    def __init__(self, configured_name: Callable[[str], str | None]) -> None:
        self._configured_name = configured_name  # requested model (or alias) → configured name, else None
        self._pairs: dict[tuple[str, int], tuple[Any, Any]] = {}

    def observe(self, model: str, status: int, seconds: float) -> None:
        pair = self._pairs.get((model, status))
        if pair is None:
            pair = self._bind(model, status)
        pair[0].inc()
        pair[1].observe(seconds)

    def _bind(self, model: str, status: int) -> tuple[Any, Any]:
        name = self._configured_name(model)
        label, code = name or OTHER_MODEL, str(status)
        pair = (REQUESTS.labels(label, code), REQUEST_SECONDS.labels(label, code))
        if name is not None and len(self._pairs) < MAX_CACHED:
            self._pairs[(model, status)] = pair
        return pair


class PerModel:
    """The children of one family for each configured model (`model` first, then `fixed` labels)."""

    def __init__(self, family: MetricWrapperBase, *fixed: str) -> None:
        self.family, self.fixed = family, fixed
        self._children: dict[str, Any] = {}

    def __call__(self, model: str) -> Any:
        child = self._children.get(model)
        if child is None:
            child = self.family.labels(model, *self.fixed)
            if len(self._children) < MAX_CACHED:
                self._children[model] = child
        return child
