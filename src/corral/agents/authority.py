"""Which MCP servers an agent worker may run for a model: what the frontend's config says, never the bus.

The reference's payloads carry the server configs (`stdio_servers` / `remote_servers`), and a stdio server is
a command line: whoever could publish on `mcp.*` or `jobs.*` could make an agent worker run anything. Here a
request only names the model; the servers come from the frontend over authenticated HTTP (registration
token + this node's credential, agent nodes only), parsed with the model-config rules, and kept for a few
seconds (a config edit reaches the workers within CACHE_S).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from corral.models.mcp import MCPServers, from_wire

CACHE_S = 5.0
CACHE_MODELS = 256

Fetch = Callable[[str], Awaitable[dict[str, Any]]]


class ServerAuthority:
    def __init__(self, fetch: Fetch, clock: Callable[[], float] = time.monotonic) -> None:
        self._fetch = fetch
        self._clock = clock
        self._cache: OrderedDict[str, tuple[float, MCPServers]] = OrderedDict()

    async def servers(self, model: str) -> MCPServers:
        """The model's servers (raises with the frontend's reason when it has none or cannot be asked)."""
        now = self._clock()
        hit = self._cache.get(model)
        if hit is not None and now - hit[0] < CACHE_S:
            return hit[1]
        body = await self._fetch(model)
        servers = from_wire(body.get("stdio_servers"), body.get("remote_servers"))
        self._cache[model] = (now, servers)
        self._cache.move_to_end(model)
        while len(self._cache) > CACHE_MODELS:
            self._cache.popitem(last=False)
        return servers
