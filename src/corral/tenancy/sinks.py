"""Several `UsageSink`s as one: the router hands each call's counts to the usage ledger (tenancy/ledger.py) and to
the keys' token-per-minute windows (tenancy/limits.py)."""

from __future__ import annotations

from corral.tenancy.caller import Caller
from corral.tenancy.usage import Counts, UsageSink


class UsageSinks:
    def __init__(self, *sinks: UsageSink) -> None:
        self.sinks = sinks

    def record(self, caller: Caller, model: str, counts: Counts) -> None:
        for sink in self.sinks:
            sink.record(caller, model, counts)
