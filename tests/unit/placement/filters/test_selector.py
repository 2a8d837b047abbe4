"""Node selectors: `key: value` must match, `!key: value` must not, `!key` with no value means absent."""

from __future__ import annotations

import pytest

from corral.placement.filters.selector import SELECTOR_MISMATCH, SelectorFilter, selector_matches
from corral.placement.request import PlacementRequest
from corral.placement.snapshot import NodeSnapshot

LABELS = {"gpu": "a100", "zone": "eu"}


@pytest.mark.parametrize(
    "selector",
    [{}, {"gpu": "a100"}, {"gpu": "a100", "zone": "eu"}, {"!gpu": "h100"}, {"!spot": ""}, {"!zone": "us"}],
)
def test_matching_selectors(selector: dict[str, str]) -> None:
    assert selector_matches(selector, LABELS) is None


@pytest.mark.parametrize(
    ("selector", "failure"),
    [
        ({"gpu": "h100"}, "label gpu must be 'h100' (is 'a100')"),
        ({"spot": "yes"}, "label spot must be 'yes' (is 'unset')"),
        ({"!gpu": "a100"}, "label gpu must not be 'a100'"),
        ({"!zone": ""}, "label zone must be absent (is 'eu')"),
        ({"zone": "eu", "gpu": ""}, "label gpu must be '' (is 'a100')"),  # an empty value is a value
    ],
)
def test_the_first_failing_term_is_named(selector: dict[str, str], failure: str) -> None:
    assert selector_matches(selector, LABELS) == failure


def test_terms_are_checked_in_order_and_the_first_failure_wins() -> None:
    assert selector_matches({"gpu": "x", "zone": "y"}, LABELS) == "label gpu must be 'x' (is 'a100')"


def test_the_filter_passes_every_node_without_a_selector() -> None:
    bare = NodeSnapshot(id="n", name="n", address="", http_address="")
    assert SelectorFilter().check(PlacementRequest("m"), bare) is None


def test_the_filter_rejects_a_node_whose_labels_do_not_match() -> None:
    labelled = NodeSnapshot(id="n", name="n", address="", http_address="", labels=LABELS)
    rejection = SelectorFilter().check(PlacementRequest("m", selector={"gpu": "h100"}), labelled)
    assert rejection is not None
    assert (rejection.filter, rejection.reason) == ("selector", SELECTOR_MISMATCH)
    assert "must be 'h100'" in rejection.detail
    assert SelectorFilter().check(PlacementRequest("m", selector={"gpu": "a100"}), labelled) is None
