"""The simulator's KV prefix cache: prefill sleeps only for uncached tokens (timings computed by hand)."""

from __future__ import annotations

import pytest

from corral.backends import simulator
from corral.backends.engine import LoadError
from corral.backends.simulator import KVCache, SimulatorEngine
from corral.proto import backend_pb2 as pb


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    recorded: list[float] = []
    monkeypatch.setattr(simulator, "_sleep", recorded.append)
    return recorded


def engine(*options: str) -> SimulatorEngine:
    e = SimulatorEngine()
    e.load(
        pb.ModelOptions(
            Model="sim", Options=["prompt_token_time_s:0.01", "output_token_time_s:0.002", *options]
        )
    )
    return e


def words(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def chat(*contents: str) -> pb.PredictOptions:
    roles = ["system", "user", "assistant", "user", "assistant", "user"]
    return pb.PredictOptions(
        Tokens=4, Messages=[pb.Message(role=roles[i], content=c) for i, c in enumerate(contents)]
    )


def test_without_a_cache_every_prompt_token_is_prefilled_each_time(sleeps: list[float]) -> None:
    e = engine()
    e.predict(pb.PredictOptions(Prompt=words(40), Tokens=4))
    e.predict(pb.PredictOptions(Prompt=words(40), Tokens=4))
    # 40 tokens × 10 ms prefill, then 4 × 2 ms decode, twice
    assert sleeps == pytest.approx([0.4, 0.002, 0.002, 0.002, 0.002] * 2)


def test_a_repeated_prompt_prefills_only_its_partial_last_block(sleeps: list[float]) -> None:
    e = engine("kv_cache_tokens:1000", "kv_block_tokens:16")
    e.predict(pb.PredictOptions(Prompt=words(40), Tokens=4))
    e.predict(pb.PredictOptions(Prompt=words(40), Tokens=4))
    # second time: 2 whole blocks (32 tokens) cached, 8 tokens × 10 ms prefilled
    assert sleeps[0] == pytest.approx(0.4)
    assert sleeps[5] == pytest.approx(0.08)


def test_the_next_turn_of_a_conversation_reuses_its_history_including_the_reply(sleeps: list[float]) -> None:
    e = engine("kv_cache_tokens:1000", "kv_block_tokens:16")
    system, first = words(30, "s"), words(10, "u")
    reply = e.predict(chat(system, first)).message.decode()  # 40 prompt tokens, 4 generated
    second = chat(system, first, reply, words(20, "v"))  # 64 prompt tokens; 44 known → 2 blocks of 16 cached
    e.predict(second)
    assert sleeps[0] == pytest.approx(0.40)
    assert sleeps[5] == pytest.approx((64 - 32) * 0.01)


def test_least_recently_used_blocks_are_evicted_beyond_capacity(sleeps: list[float]) -> None:
    e = engine("kv_cache_tokens:32", "kv_block_tokens:16")  # room for 2 blocks
    e.predict(pb.PredictOptions(Prompt=words(32, "a"), Tokens=1))  # a-blocks cached (+ no whole output block)
    e.predict(pb.PredictOptions(Prompt=words(32, "b"), Tokens=1))  # b-blocks evict the a-blocks
    e.predict(pb.PredictOptions(Prompt=words(32, "a"), Tokens=1))  # a is cold again
    assert sleeps[0::2] == pytest.approx([0.32, 0.32, 0.32])


def test_kv_cache_keeps_the_blocks_used_last() -> None:
    cache = KVCache(capacity_tokens=48, block_tokens=16)
    a, b = [f"a{i}" for i in range(32)], [f"b{i}" for i in range(16)]
    cache.store(a)
    cache.store(b)
    assert cache.cached(a) == 32  # touches both a-blocks: b is now the oldest
    cache.store([f"c{i}" for i in range(16)])
    assert cache.cached(b) == 0
    assert cache.cached(a) == 32
    assert len(cache) == 3


def test_a_negative_cache_capacity_is_refused() -> None:
    e = SimulatorEngine()
    with pytest.raises(LoadError, match="kv_cache_tokens"):
        e.load(pb.ModelOptions(Model="sim", Options=["kv_cache_tokens:-5"]))
