"""The client source address that per-source limits count by, and the bounded table they count in.

The source is the TCP peer's address (the frontend reads no X-Forwarded-For): behind a reverse proxy
every client shares the proxy's address, so per-source limits then apply to all of them together. An
IPv6 peer counts by its /64, the block one host or site is given: a fresh address per attempt gains
nothing.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

T = TypeVar("T")
MAX_SOURCES = 10_000  # entries per table: a flood from many addresses evicts the oldest, never grows memory
UNKNOWN_SOURCE = "-"  # a connection without a peer address (a Unix socket, an in-process call)


def source_of(scope: Mapping[str, Any]) -> str:
    client = scope.get("client")
    if not client:
        return UNKNOWN_SOURCE
    host = str(client[0])
    if ":" not in host:
        return host
    try:
        return str(ipaddress.ip_network(f"{host}/64", strict=False))
    except ValueError:
        return host


class SourceTable(Generic[T]):
    """source → entry, at most `max_entries`; a new source past it evicts the one that came first."""

    def __init__(self, max_entries: int = MAX_SOURCES) -> None:
        self.max_entries = max_entries
        self._entries: dict[str, T] = {}

    def get(self, source: str) -> T | None:
        return self._entries.get(source)

    def setdefault(self, source: str, make: Callable[[], T]) -> T:
        entry = self._entries.get(source)
        if entry is None:
            if len(self._entries) >= self.max_entries:
                del self._entries[next(iter(self._entries))]
            entry = self._entries[source] = make()
        return entry

    def pop(self, source: str) -> None:
        self._entries.pop(source, None)

    def __len__(self) -> int:
        return len(self._entries)
