"""Prefix index: which replica has seen which prompt prefix, per replica (not per node), with a TTL.

A prompt is cut into fixed-size character blocks (the rendered prompt, else "<role>\\n<content>\\n" per
message); block i is named by a hash of the whole prefix up to and including it, salted with the
model name, so one flat map serves every model and a chain lookup is one dict probe per block.
The hash is CRC-32 and Adler-32 chained over the prefix (64 bits, C speed, stable across processes):
a collision can only cost a cache miss, because only replicas of the routable view are candidates.

Memory is bounded: at most `max_blocks` blocks, least recently observed evicted first; entries older
than the TTL are ignored and swept as new observations arrive. A replica that leaves the view
(stopped, evicted, replaced by a config revision) is dropped: its entries seen before that moment
no longer match, even if a peer re-announces them late.
"""

from __future__ import annotations

import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence

BLOCK_CHARS = 256  # the reference's window
MAX_DEPTH = 64  # blocks hashed per prompt: the first 16 KiB decide the route
DEFAULT_TTL_S = 300.0
DEFAULT_MAX_BLOCKS = 100_000


def prefix_chain(model: str, text: str) -> list[int]:
    """The block hashes of `text`'s prefixes (the last, partial block included), at most MAX_DEPTH."""
    data = text[: BLOCK_CHARS * MAX_DEPTH].encode()[: BLOCK_CHARS * MAX_DEPTH]  # blocks are cut by bytes
    crc32, adler32 = zlib.crc32, zlib.adler32
    salt = model.encode()
    crc, adler = crc32(salt), adler32(salt)
    chain = []
    for start in range(0, len(data), BLOCK_CHARS):
        window = data[start : start + BLOCK_CHARS]
        crc, adler = crc32(window, crc), adler32(window, adler)
        chain.append((crc << 32) | adler)
    return chain


def message_text(prompt: str, messages: Sequence[tuple[str, str]]) -> str:
    """The canonical text to hash: the rendered prompt when there is one, else the messages."""
    if prompt:
        return prompt
    return "".join(f"{role}\n{content}\n" for role, content in messages)


class PrefixIndex:
    def __init__(
        self,
        ttl_s: float = DEFAULT_TTL_S,
        max_blocks: int = DEFAULT_MAX_BLOCKS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s, self.max_blocks, self._clock = ttl_s, max_blocks, clock
        self._blocks: OrderedDict[int, dict[str, float]] = OrderedDict()  # hash → replica key → last seen
        self._dropped_s: dict[str, float] = {}  # replica key → when it left the view

    def __len__(self) -> int:
        return len(self._blocks)

    def observe(self, chain: Sequence[int], key: str) -> bool:
        """Record that replica `key` now holds every prefix of `chain`; True when that is news (a new
        block, or one not refreshed for half the TTL) worth telling the other frontends."""
        now = self._clock()
        refresh_before = now - self.ttl_s / 2
        changed = False
        blocks = self._blocks
        for block in chain:
            holders = blocks.get(block)
            if holders is None:
                blocks[block] = {key: now}
                changed = True
                continue
            if holders.get(key, -1.0) < refresh_before:
                changed = True
            holders[key] = now
            blocks.move_to_end(block)
        self._evict(now)
        return changed

    def _evict(self, now: float) -> None:
        horizon = now - self.ttl_s
        blocks = self._blocks
        while blocks:
            oldest = next(iter(blocks))
            if len(blocks) <= self.max_blocks and max(blocks[oldest].values()) >= horizon:
                return
            del blocks[oldest]

    def match(self, chain: Sequence[int], candidates: Collection[str]) -> tuple[int, list[str]]:
        """The longest matched prefix (in blocks) among `candidates`, and the replicas that hold it.

        A block's hash names its whole prefix, so the deepest block a replica holds is its longest
        match: walk from the end, and stop at the first block any live candidate holds."""
        horizon = self._clock() - self.ttl_s
        dropped = self._dropped_s
        blocks = self._blocks
        for depth in range(len(chain), 0, -1):
            holders = blocks.get(chain[depth - 1])
            if holders is None:
                continue
            held = [k for k in candidates if _live(holders.get(k), horizon, dropped.get(k))]
            if held:
                return depth, held
        return 0, []

    def drop(self, key: str) -> None:
        """Forget replica `key`: entries it had before now never match again."""
        self._dropped_s[key] = self._clock()
        if len(self._dropped_s) > self.max_blocks:  # bounded even under endless churn
            horizon = self._clock() - self.ttl_s
            self._dropped_s = {k: t for k, t in self._dropped_s.items() if t >= horizon}


def _live(seen_s: float | None, horizon_s: float, dropped_s: float | None) -> bool:
    return seen_s is not None and seen_s >= horizon_s and (dropped_s is None or seen_s > dropped_s)
