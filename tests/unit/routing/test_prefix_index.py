"""The prefix index: chains, longest match per replica, TTL, bounded memory, replica removal."""

from __future__ import annotations

from corral.routing.prefix_index import BLOCK_CHARS, MAX_DEPTH, PrefixIndex, message_text, prefix_chain


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_chain_has_one_hash_per_block_and_shares_the_prefix_of_a_longer_prompt() -> None:
    system = "s" * (BLOCK_CHARS * 3)
    one, two = prefix_chain("m", system + "hello"), prefix_chain("m", system + "hello, and more" * 40)
    assert len(one) == 4
    assert one[:3] == two[:3] and one[3] != two[3]


def test_chains_are_salted_by_model_and_capped_in_depth() -> None:
    assert prefix_chain("a", "x" * 300) != prefix_chain("b", "x" * 300)
    assert len(prefix_chain("m", "y" * BLOCK_CHARS * (MAX_DEPTH + 5))) == MAX_DEPTH
    assert prefix_chain("m", "") == []


def test_the_depth_cap_holds_for_text_of_several_bytes_per_character() -> None:
    for text in (
        "é" * BLOCK_CHARS * MAX_DEPTH,
        "漢" * BLOCK_CHARS * MAX_DEPTH,
        "🦙" * 2 * BLOCK_CHARS * MAX_DEPTH,
    ):
        assert len(prefix_chain("m", text)) == MAX_DEPTH


def test_the_canonical_text_is_the_rendered_prompt_else_role_and_content_lines() -> None:
    assert message_text("rendered", [("user", "hi")]) == "rendered"
    assert message_text("", [("system", "be brief"), ("user", "hi")]) == "system\nbe brief\nuser\nhi\n"


def test_the_longest_match_wins_and_every_holder_of_it_is_named() -> None:
    index = PrefixIndex(clock=Clock())
    chain = [1, 2, 3, 4]
    index.observe([1, 2], "r1")
    index.observe([1, 2, 3], "r2")
    index.observe([1, 2, 3], "r3")
    assert index.match(chain, ["r1", "r2", "r3"]) == (3, ["r2", "r3"])
    assert index.match(chain, ["r1"]) == (2, ["r1"])
    assert index.match([9, 10], ["r1", "r2"]) == (0, [])


def test_a_real_conversation_matches_its_history_on_the_replica_that_served_it() -> None:
    index = PrefixIndex(clock=Clock())
    system = "system\n" + "be brief. " * 100 + "\n"
    first = system + "user\nwhat is a river?\n"
    index.observe(prefix_chain("m", first), "r1")
    index.observe(prefix_chain("m", system + "user\nsomething else entirely\n"), "r2")
    second = prefix_chain("m", first + "assistant\nwater that flows.\nuser\nand a lake?\n")
    assert index.match(second, ["r1", "r2"]) == (len(first) // BLOCK_CHARS, ["r1"])


def test_only_candidates_match() -> None:
    index = PrefixIndex(clock=Clock())
    index.observe([1, 2], "gone")
    assert index.match([1, 2], ["r1"]) == (0, [])


def test_entries_older_than_the_ttl_do_not_match_and_are_swept() -> None:
    clock = Clock()
    index = PrefixIndex(ttl_s=60, clock=clock)
    index.observe([1, 2], "r1")
    clock.now += 61
    assert index.match([1, 2], ["r1"]) == (0, [])
    index.observe([7], "r2")
    assert len(index) == 1


def test_observe_reports_news_only_for_new_or_half_ttl_old_blocks() -> None:
    clock = Clock()
    index = PrefixIndex(ttl_s=60, clock=clock)
    assert index.observe([1, 2], "r1") is True
    assert index.observe([1, 2], "r1") is False
    clock.now += 31
    assert index.observe([1, 2], "r1") is True
    assert index.observe([1, 2], "r2") is True


def test_memory_is_bounded_least_recently_observed_first() -> None:
    index = PrefixIndex(max_blocks=3, clock=Clock())
    index.observe([1, 2], "r1")
    index.observe([3], "r1")
    index.observe([1], "r1")  # 1 becomes the most recent: 2 is now the oldest
    index.observe([4], "r1")
    assert len(index) == 3
    assert index.match([1], ["r1"]) == (1, ["r1"])
    assert index.match([1, 2], ["r1"]) == (1, ["r1"])  # block 2 was evicted


def test_a_dropped_replica_no_longer_matches_until_it_is_observed_again() -> None:
    clock = Clock()
    index = PrefixIndex(clock=clock)
    index.observe([1, 2], "r1")
    clock.now += 1
    index.drop("r1")
    assert index.match([1, 2], ["r1"]) == (0, [])
    clock.now += 1
    index.observe([1], "r1")  # the new process behind the same key learns again
    assert index.match([1, 2], ["r1"]) == (1, ["r1"])
