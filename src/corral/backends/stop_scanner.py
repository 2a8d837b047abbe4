"""Cut streamed text at the first stop string without ever emitting part of a stop string.

Text arrives in pieces (one per token). A piece may complete a stop string that began in an
earlier piece, so the tail that could still be the start of a stop string is held back until
the next piece decides it.
"""

from __future__ import annotations

from collections.abc import Iterable


class StopScanner:
    def __init__(self, stops: Iterable[str]) -> None:
        self._stops = sorted({stop for stop in stops if stop}, key=len, reverse=True)
        self._held = ""
        self.stopped = False

    def feed(self, piece: str) -> str:
        """Add a piece; return the text now safe to emit. Sets `stopped` when a stop string is hit."""
        if self.stopped:
            return ""
        text = self._held + piece
        cut = min((index for index in (text.find(stop) for stop in self._stops) if index >= 0), default=-1)
        if cut >= 0:
            self._held, self.stopped = "", True
            return text[:cut]
        hold = self._partial_stop_length(text)
        self._held = text[len(text) - hold :] if hold else ""
        return text[: len(text) - hold]

    def flush(self) -> str:
        """End of generation: whatever was held back is real text after all."""
        held, self._held = self._held, ""
        return "" if self.stopped else held

    def _partial_stop_length(self, text: str) -> int:
        """Length of the longest suffix of `text` that is a proper prefix of some stop string."""
        longest = 0
        for stop in self._stops:
            for length in range(min(len(stop) - 1, len(text)), longest, -1):
                if text.endswith(stop[:length]):
                    longest = length
                    break
        return longest
