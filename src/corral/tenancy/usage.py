"""Token counts as the engine reported them, and where routing hands them over (`UsageSink`).

Routing sees every backend reply (routing/calls.py), so it is the one place that counts: a unary reply's counts
when it arrives, a stream's from its final reply. The sink is given the caller of the request (tenancy/caller.py)
and must not block: it accumulates in memory and writes in batches (tenancy/ledger.py).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

from corral.proto.backend_pb2 import Reply
from corral.tenancy.caller import Caller


class Counts(NamedTuple):  # a tuple: built once per backend call (half a frozen dataclass's cost)
    prompt: int = 0
    completion: int = 0
    cached: int = 0

    @property
    def total(self) -> int:
        return self.prompt + self.completion


NONE = Counts()


def counts_of(method: str, reply: Any) -> Counts:
    """The engine's own counts in one backend reply (NONE when it carries none: a stream's non-final reply)."""
    if method == "Embedding":
        return Counts(prompt=int(reply.prompt_tokens or reply.tokens))
    if method == "Rerank":
        usage = getattr(reply, "usage", None)
        return Counts(prompt=int(usage.prompt_tokens)) if usage is not None else NONE
    if (
        type(reply) is Reply
    ):  # Predict's (and a stream's): its fields as they are (it reports no cached count)
        prompt, completion, cached = reply.prompt_tokens, reply.tokens, 0
    else:
        prompt, completion = int(getattr(reply, "prompt_tokens", 0)), int(getattr(reply, "tokens", 0))
        cached = int(getattr(reply, "cached_tokens", 0) or 0)
    if not prompt and not completion:
        return NONE
    return Counts(prompt, completion, cached)


class UsageSink(Protocol):
    def record(self, caller: Caller, model: str, counts: Counts) -> None:
        """One backend call served `counts` to `caller` on `model`. Called on the event loop: must not block."""


class NoUsage:
    def record(self, caller: Caller, model: str, counts: Counts) -> None:
        return None
