"""Why a node was not chosen, and the one-sentence summary when none fits."""

from __future__ import annotations

import pytest

from corral.placement.errors import PlacementError
from corral.placement.rejection import NoNodeFits, Rejection, summarize


def test_the_summary_counts_reasons_most_common_first() -> None:
    rejections = {
        "a": Rejection("disk_headroom", "not enough free disk"),
        "b": Rejection("selector", "selector mismatch"),
        "c": Rejection("disk_headroom", "not enough free disk", "c has 1 GB free"),
    }
    assert summarize("llama", 5, rejections) == (
        "scheduling llama: 0/5 nodes fit: 2 not enough free disk, 1 selector mismatch"
    )


def test_a_summary_of_no_rejection_still_reads_as_a_sentence() -> None:
    assert summarize("llama", 0, {}) == "scheduling llama: 0/0 nodes fit: "


def test_rejections_compare_and_hash_without_their_fields() -> None:
    one = Rejection("f", "r", "d", {"need": 1})
    other = Rejection("f", "r", "d", {"need": 2})
    assert hash(one) == hash(other)
    assert one != other  # fields still take part in equality
    assert Rejection("f", "r").fields == {} and Rejection("f", "r").fields is not Rejection("f", "r").fields


def test_no_node_fits_is_a_placement_error_carrying_every_rejection() -> None:
    rejections = {"a": Rejection("selector", "selector mismatch")}
    with pytest.raises(PlacementError, match="0/1 nodes fit") as raised:
        raise NoNodeFits(summarize("m", 1, rejections), rejections)
    assert isinstance(raised.value, NoNodeFits) and raised.value.rejections is rejections
