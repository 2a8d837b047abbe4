"""`prefix_cache`: the longest held prefix wins unless below min_prefix_match or the load guard says no."""

from __future__ import annotations

import random

import pytest

from corral.routing.pickers.base import Policy
from corral.routing.pickers.prefix_cache import PrefixCache, eligible
from corral.routing.prefix_index import PrefixIndex
from support.replicas import POLICY, loads, replicas


@pytest.mark.parametrize(
    ("in_flight", "minimum", "abs_", "rel", "ok"),
    [
        (2, 0, 2, 1.5, False),  # 2 ≤ 0+2 but 2 > 0×1.5+1
        (1, 0, 2, 1.5, True),
        (4, 2, 2, 1.5, True),  # 4 ≤ 2+2 and 4 ≤ 2×1.5+1
        (5, 2, 2, 1.5, False),  # abs breached
        (13, 8, 64, 1.5, True),  # 13 ≤ 8×1.5+1
        (14, 8, 64, 1.5, False),  # rel breached
    ],
)
def test_the_guard_admits_within_both_thresholds(
    in_flight: int, minimum: int, abs_: int, rel: float, ok: bool
) -> None:
    assert eligible(in_flight, minimum, Policy("prefix_cache", balance_abs=abs_, balance_rel=rel)) is ok


def test_prefix_cache_routes_to_the_replica_holding_the_longest_prefix() -> None:
    index, rs = PrefixIndex(), replicas(4)
    index.observe([1, 2, 3], rs[2].key)
    index.observe([1], rs[1].key)
    d = PrefixCache(index).pick(rs, loads({rs[2].key: 1}), POLICY, [1, 2, 3, 4])
    assert (d.replica, d.match_blocks, d.chain_blocks) == (rs[2], 3, 4)
    assert d.reason == "holds 3 of 4 prompt blocks (0.75)"


def test_a_match_below_min_prefix_match_goes_to_the_least_loaded() -> None:
    index, rs = PrefixIndex(), replicas(2)
    index.observe([1], rs[1].key)
    d = PrefixCache(index).pick(rs, loads({rs[0].key: 1}), POLICY, [1, 2, 3, 4])  # 0.25 < 0.3
    assert d.replica is rs[1]  # least loaded happens to be it; now load it
    d = PrefixCache(index).pick(rs, loads({rs[1].key: 1}), POLICY, [1, 2, 3, 4])
    assert d.replica is rs[0]
    assert d.reason == "best match 0.25 of the prompt is below min_prefix_match 0.3: least loaded"


def test_the_guard_sends_a_hot_replica_that_is_too_busy_to_the_least_loaded() -> None:
    index, rs = PrefixIndex(), replicas(2)
    index.observe([1, 2], rs[0].key)
    d = PrefixCache(index).pick(rs, loads({rs[0].key: 2}), POLICY, [1, 2])
    assert d.replica is rs[1]
    assert d.reason == (
        f"{rs[0].key} holds 1.00 of the prompt but has 2 in flight vs 0 (balance_abs_threshold 2, "
        "balance_rel_threshold 1.5): least loaded"
    )
    assert PrefixCache(index).pick(rs, loads({rs[0].key: 1}), POLICY, [1, 2]).replica is rs[0]


def test_among_replicas_with_the_same_match_the_least_loaded_wins() -> None:
    index, rs = PrefixIndex(), replicas(3)
    for r in rs:
        index.observe([1, 2], r.key)
    d = PrefixCache(index).pick(rs, loads({rs[0].key: 1, rs[2].key: 1}), POLICY, [1, 2, 3])
    assert d.replica is rs[1]


def test_without_a_prompt_the_least_loaded_wins() -> None:
    rs = replicas(2)
    chains: tuple[list[int] | None, ...] = (None, [])
    for chain in chains:
        d = PrefixCache(PrefixIndex()).pick(rs, loads({rs[0].key: 3}), POLICY, chain)
        assert d.replica is rs[1] and d.reason == "no prompt to match: least loaded"


def test_when_no_replica_holds_a_prefix_the_least_loaded_wins() -> None:
    rs = replicas(2)
    d = PrefixCache(PrefixIndex()).pick(rs, loads({rs[1].key: 3}), POLICY, [7, 8])
    assert d.replica is rs[0] and (d.match_blocks, d.chain_blocks) == (0, 2)


def test_a_holder_outside_the_candidates_is_not_chosen() -> None:
    index, rs = PrefixIndex(), replicas(3)
    index.observe([1, 2], rs[2].key)
    d = PrefixCache(index).pick(rs[:2], loads({}), POLICY, [1, 2])
    assert d.replica in rs[:2] and d.match_blocks == 0


def test_a_match_exactly_at_min_prefix_match_is_enough() -> None:
    index, rs = PrefixIndex(), replicas(2)
    index.observe([1, 2, 3], rs[1].key)
    policy = Policy("prefix_cache", min_prefix_match=0.75)
    assert PrefixCache(index).pick(rs, loads({}), policy, [1, 2, 3, 4]).replica is rs[1]


def test_the_guard_with_zero_thresholds_admits_no_more_than_the_minimum() -> None:
    strict = Policy("prefix_cache", balance_abs=0, balance_rel=0.0)
    assert eligible(0, 0, strict)
    assert eligible(1, 1, strict)  # 1 <= 1 + 0 and 1 <= 1 * 0 + 1
    assert not eligible(1, 0, strict)
    assert not eligible(2, 2, strict)  # the relative bound alone: 2 > 2 * 0 + 1


def test_the_least_loaded_fallback_is_a_random_one_among_near_equal_loads() -> None:
    rs = replicas(3)
    picker = PrefixCache(PrefixIndex(), random.Random(4))
    chosen = {picker.pick(rs, loads({rs[2].key: 2}), POLICY, [7, 8]).replica.key for _ in range(30)}
    assert chosen == {rs[0].key, rs[1].key}
