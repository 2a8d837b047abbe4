"""Backend gRPC port allocation with per-key affinity and quarantine of released ports.

Pure logic (the clock is injected): the supervisor calls `allocate(key)` when it starts a
backend process and `release(key, port)` after the process has exited.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

PORT_QUARANTINE_S = 15.0
PORT_AFFINITY_S = 5 * 60.0
BUSY_PORT_HOLD_S = 5 * 60.0  # a port another process holds is not tried again for this long


class PortRangeExhausted(Exception):
    """Every port in [base, LOCALAI_GRPC_MAX_PORT] is in use or quarantined; raise LOCALAI_GRPC_MAX_PORT."""


@dataclass
class _Claim:
    key: str
    expires_at_s: float | None  # None while the key's process holds the port


class PortAllocator:
    def __init__(self, base_port: int, max_port: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.base_port = base_port
        self.max_port = max_port
        self._clock = clock
        self._in_use: dict[int, str] = {}
        self._quarantine_until_s: dict[int, float] = {}
        self._claims: dict[int, _Claim] = {}
        self._free: list[int] = []  # released, out of quarantine; most recently freed last
        self._next_never_used = base_port

    @property
    def in_use(self) -> dict[int, str]:
        return dict(self._in_use)

    def _sweep(self) -> None:
        now = self._clock()
        for port, until in list(self._quarantine_until_s.items()):
            if until <= now:
                del self._quarantine_until_s[port]
                self._free.append(port)
        for port, claim in list(self._claims.items()):
            if claim.expires_at_s is not None and claim.expires_at_s <= now:
                del self._claims[port]

    def _take(self, port: int, key: str) -> int:
        if port in self._free:
            self._free.remove(port)
        self._in_use[port] = key
        self._claims[port] = _Claim(key, None)
        return port

    def allocate(self, key: str) -> int:
        self._sweep()
        for port in reversed(self._free):  # 1. the key's own earlier port
            claim = self._claims.get(port)
            if claim is not None and claim.key == key:
                return self._take(port, key)
        for port in reversed(self._free):  # 2. a free port nobody else claims, most recently freed first
            if port not in self._claims:
                return self._take(port, key)
        while self._next_never_used <= self.max_port:  # 3. grow into never-used ports
            port = self._next_never_used
            self._next_never_used += 1
            if port not in self._in_use and port not in self._quarantine_until_s:
                return self._take(port, key)
        for port in reversed(self._free):  # 4. steal a free port claimed by another key
            return self._take(port, key)
        raise PortRangeExhausted(
            f"no free gRPC port in range: {self.base_port}-{self.max_port} is fully consumed by "
            f"{len(self._in_use)} running backend(s) and {len(self._quarantine_until_s)} port(s) still in "
            "quarantine; raise LOCALAI_GRPC_MAX_PORT to widen the range"
        )

    def release(self, key: str, port: int) -> None:
        """Return a port after its process exited: quarantined, then preferred for the same key."""
        if self._in_use.get(port) != key:
            return
        del self._in_use[port]
        now = self._clock()
        self._quarantine_until_s[port] = now + PORT_QUARANTINE_S
        self._claims[port] = _Claim(key, now + PORT_AFFINITY_S)

    def rekey(self, port: int, old_key: str, new_key: str) -> None:
        """The running process on `port` now serves `new_key` (a spare handed over): it holds the port from now on."""
        if self._in_use.get(port) != old_key:
            raise ValueError(f"port {port} is not held by {old_key!r}")
        self._in_use[port] = new_key
        self._claims[port] = _Claim(new_key, None)

    def set_aside_busy(self, key: str, port: int) -> None:
        """A backend could not bind `port` (another process holds it): give it up, keep no affinity to it,
        and do not hand it out again for BUSY_PORT_HOLD_S."""
        if self._in_use.get(port) == key:
            del self._in_use[port]
        self._claims.pop(port, None)
        if port in self._free:
            self._free.remove(port)
        self._quarantine_until_s[port] = self._clock() + BUSY_PORT_HOLD_S
