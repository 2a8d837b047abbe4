"""Exact prompt-prefix reuse (backends/llama_prompt_cache.py): the chunks a prompt is evaluated in depend on the
prompt alone, and a later prompt keeps only whole chunks the two prompts share."""

from __future__ import annotations

from corral.backends.llama_prompt_cache import chunk_ends, reusable

HEAD = [2, 105, 2364, 107]


def test_a_prompt_beginning_with_the_head_has_the_head_as_its_first_chunk_then_strides() -> None:
    prompt = [*HEAD, *range(1000, 1010)]
    assert chunk_ends(prompt, HEAD, 4) == [4, 8, 12, 14]
    assert chunk_ends(prompt, HEAD, 256) == [4, 14]


def test_a_prompt_without_the_head_strides_from_its_first_token() -> None:
    assert chunk_ends([2, 9, 9, 9, 9, 9], HEAD, 4) == [4, 6]
    assert chunk_ends([2, 9], HEAD, 4) == [2]
    assert chunk_ends(HEAD, HEAD, 4) == [4]  # the head alone is one chunk, the prompt's last
    assert chunk_ends([2, 9, 9], [], 256) == [3]
    assert chunk_ends([], HEAD, 4) == []


def test_the_head_of_another_chat_is_kept_and_its_last_chunk_evaluated() -> None:
    first, second = [*HEAD, 7, 7, 7], [*HEAD, 8, 8, 8, 8, 8]
    assert reusable(first, chunk_ends(first, HEAD, 256), second, chunk_ends(second, HEAD, 256)) == 4


def test_only_whole_chunks_both_prompts_share_are_kept() -> None:
    turn = [*HEAD, *range(100, 111)]  # chunks end at 4, 8, 12, 15
    held_ends = chunk_ends(turn, HEAD, 4)
    assert held_ends == [4, 8, 12, 15]
    longer = [*turn, 5, 5, 5, 5, 5, 5]  # 4, 8, 12, 16, 20, 21: 15 is no end of it, 12 is
    assert reusable(turn, held_ends, longer, chunk_ends(longer, HEAD, 4)) == 12
    differs = [*HEAD, 100, 101, 102, 999, *range(104, 115)]  # equal up to 7: only the head
    assert reusable(turn, held_ends, differs, chunk_ends(differs, HEAD, 4)) == 4
    # the same prompt again: all but its last chunk
    assert reusable(turn, held_ends, turn, held_ends) == 12


def test_nothing_is_kept_from_a_prompt_chunked_otherwise_or_without_a_shared_chunk() -> None:
    raw = [2, *range(100, 110)]  # no head: chunks 4, 8, 11
    chat = [*HEAD, *range(100, 110)]
    assert reusable(raw, chunk_ends(raw, HEAD, 4), chat, chunk_ends(chat, HEAD, 4)) == 0
    assert reusable([], [], chat, chunk_ends(chat, HEAD, 4)) == 0
    short = [*HEAD]
    assert reusable(chat, chunk_ends(chat, HEAD, 4), short, chunk_ends(short, HEAD, 4)) == 0
