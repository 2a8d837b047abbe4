"""Failed API-key guesses per source address: the later ones are answered slowly, then refused (429).

A key is a guess when it is neither known good nor known wrong (frontend/access.py answers those two from
memory, without a guess and without PostgreSQL). Each guess is charged to its source before its lookup
and refunded when the key turns out right, so concurrent guesses cannot overrun the limit: one source
costs PostgreSQL at most `limit` lookups per window. Of those, the first half are answered at once; the
rest wait `DELAY_FIRST_S`, doubling up to `DELAY_MAX_S`, before their 401. Past the limit the source
gets 429 with `Retry-After` (the rest of its window) and no lookup. A window starts with a source's
first guess and is not extended by refused attempts, so a client behind the same address gets its turn
when the window ends.

The trade-off: an address shared by an attacker and a legitimate client (a NAT, a reverse proxy) is
refused as a whole, for at most one window. A key this frontend has seen valid before stays valid for
it throughout (access.py lets a known-good key through without asking this throttle), so only a client
presenting its key for the first time can be locked out by someone else's failures, for at most
`window_s`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from corral.frontend.sources import MAX_SOURCES, SourceTable

DELAY_FIRST_S = 0.25
DELAY_MAX_S = 2.0
KNOB = "CORRAL_AUTH_FAILURE_LIMIT"


@dataclass
class _Window:
    started_s: float
    guesses: int = 0


class AuthThrottle:
    def __init__(
        self,
        limit: int,
        window_s: float,
        clock: Callable[[], float] = time.monotonic,
        max_sources: int = MAX_SOURCES,
    ) -> None:
        self.limit, self.window_s, self._clock = limit, window_s, clock
        self._windows: SourceTable[_Window] = SourceTable(max_sources)

    def _current(self, source: str, now_s: float) -> _Window | None:
        window = self._windows.get(source)
        if window is not None and now_s - window.started_s >= self.window_s:
            self._windows.pop(source)
            return None
        return window

    def retry_after_s(self, source: str) -> float:
        """0 when `source` may present an unknown key now; else the seconds until its window ends."""
        now_s = self._clock()
        window = self._current(source, now_s)
        if window is None or window.guesses < self.limit:
            return 0.0
        return window.started_s + self.window_s - now_s

    def charge(self, source: str) -> None:
        """Count a guess about to be looked up."""
        now_s = self._clock()
        window = self._current(source, now_s) or self._windows.setdefault(source, lambda: _Window(now_s))
        window.guesses += 1

    def refund(self, source: str) -> None:
        """The guess was a valid key: it does not count (nor, if it was the only one, start a window)."""
        window = self._windows.get(source)
        if window is None:
            return
        window.guesses -= 1
        if window.guesses <= 0:
            self._windows.pop(source)

    def delay_s(self, source: str) -> float:
        """How long to hold the 401 of the source's latest wrong guess."""
        window = self._windows.get(source)
        free = self.limit // 2
        if window is None or window.guesses <= free:
            return 0.0
        return min(DELAY_MAX_S, DELAY_FIRST_S * 2.0 ** (window.guesses - free - 1))

    def refusal(self, retry_after_s: float) -> tuple[str, int]:
        """The 429's message and its Retry-After (whole seconds, at least 1)."""
        seconds = max(1, math.ceil(retry_after_s))
        return (
            f"too many unknown API keys from this address: {self.limit} in {self.window_s:g}s ({KNOB}, "
            f"CORRAL_AUTH_FAILURE_WINDOW); retry after {seconds}s with a valid key",
            seconds,
        )
