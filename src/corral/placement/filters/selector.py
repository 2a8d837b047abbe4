"""Node selectors: `key: value` must match; `!key: value` must not; `!key` (empty value) means absent."""

from __future__ import annotations

from corral.placement.rejection import Rejection
from corral.placement.request import PlacementRequest
from corral.placement.snapshot import NodeSnapshot

SELECTOR_MISMATCH = "selector mismatch"


def selector_matches(selector: dict[str, str], labels: dict[str, str]) -> str | None:
    """None when every term matches, else the first failing term."""
    for key, value in selector.items():
        if key.startswith("!"):
            label = key[1:]
            if value in ("", None):
                if label in labels:
                    return f"label {label} must be absent (is {labels[label]!r})"
            elif labels.get(label) == value:
                return f"label {label} must not be {value!r}"
        elif labels.get(key) != value:
            return f"label {key} must be {value!r} (is {labels.get(key, 'unset')!r})"
    return None


class SelectorFilter:
    name = "selector"

    def check(self, req: PlacementRequest, node: NodeSnapshot) -> Rejection | None:
        if not req.selector:
            return None
        failed = selector_matches(req.selector, node.labels)
        return None if failed is None else Rejection(self.name, SELECTOR_MISMATCH, failed)
