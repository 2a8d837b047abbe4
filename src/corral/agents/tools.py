"""What an agent worker answers on `mcp.discovery` and `mcp.tools.execute` (queue group `agent-workers`).

Every failure is an answer (`error` set), never a silence: a config the worker cannot use, a server
that does not start, a tool that fails or runs past its deadline. A request only names the model: the
servers it may use come from the frontend (`authority.py`), whatever server config the payload carries.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from corral.agents.sessions import Server, SessionPool, SessionUnavailable, ToolTimeout, server_type
from corral.bus.agent_messages import (
    MCPDiscoveryRequest,
    MCPDiscoveryResponse,
    MCPServerInfo,
    MCPToolDef,
    MCPToolRequest,
    MCPToolResponse,
)
from corral.models.mcp import MCPConfigError, MCPServers

log = logging.getLogger(__name__)

DEFAULT_TOOL_TIMEOUT_S = 360.0  # the reference's MCP tool budget
MAX_TOOL_TIMEOUT_S = 3600.0
TOOL_TIMEOUT_KNOB = "--mcp-tool-timeout / CORRAL_MCP_TOOL_TIMEOUT"


def all_servers(servers: MCPServers) -> list[Server]:
    return [*servers.stdio, *servers.remote]


def tool_function(tool: Any) -> dict[str, Any]:
    """An MCP tool as an OpenAI function definition."""
    schema = getattr(tool, "input_schema", None) or {"type": "object", "properties": {}}
    return {"name": tool.name, "description": tool.description or "", "parameters": schema}


Servers = Callable[[str], Awaitable[MCPServers]]  # model -> its MCP servers (authority.ServerAuthority)


class ToolService:
    def __init__(self, pool: SessionPool, servers: Servers, node_id: str = "") -> None:
        self.pool = pool
        self.servers = servers
        self.node_id = node_id

    async def _servers(self, model: str) -> MCPServers | str:
        """The model's servers, or why there are none (an answer, not an exception)."""
        try:
            return await self.servers(model)
        except MCPConfigError as exc:
            return f"invalid MCP config: {exc}"
        except Exception as exc:
            return str(exc) or type(exc).__name__

    async def discover(self, req: MCPDiscoveryRequest) -> MCPDiscoveryResponse:
        servers = await self._servers(req.model_name)
        if isinstance(servers, str):
            return MCPDiscoveryResponse(error=servers, node_id=self.node_id)
        infos, defs = await self.describe(all_servers(servers))
        return MCPDiscoveryResponse(servers=infos, tools=defs, node_id=self.node_id)

    async def describe(self, servers: list[Server]) -> tuple[list[MCPServerInfo], list[MCPToolDef]]:
        infos: list[MCPServerInfo] = []
        defs: list[MCPToolDef] = []
        for server, outcome in zip(
            servers,
            await asyncio.gather(*(self.pool.get(s) for s in servers), return_exceptions=True),
            strict=True,
        ):
            if isinstance(outcome, BaseException):
                infos.append(
                    MCPServerInfo(
                        name=server.name,
                        type=server_type(server),
                        tools=[],
                        error=str(outcome) or type(outcome).__name__,
                    )
                )
                continue
            infos.append(
                MCPServerInfo(
                    name=server.name, type=server_type(server), tools=[t.name for t in outcome.tools]
                )
            )
            defs.extend(
                MCPToolDef(server_name=server.name, tool_name=t.name, function=tool_function(t))
                for t in outcome.tools
            )
        return infos, defs

    async def execute(
        self, req: MCPToolRequest, default_timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
    ) -> MCPToolResponse:
        servers = await self._servers(req.model_name)
        if isinstance(servers, str):
            return self._error(servers)
        timeout_s = min(req.timeout_s or default_timeout_s, MAX_TOOL_TIMEOUT_S)
        server = await self._holder(all_servers(servers), req.tool_name)
        if isinstance(server, str):
            return self._error(server)
        try:
            text, is_error = await self.pool.call_tool(
                server, req.tool_name, req.arguments or {}, timeout_s, TOOL_TIMEOUT_KNOB
            )
        except (ToolTimeout, SessionUnavailable) as exc:
            return self._error(str(exc))
        except Exception as exc:
            return self._error(f"MCP tool {req.tool_name!r} failed: {exc}")
        if is_error:
            return self._error(f"MCP tool {req.tool_name!r} returned an error: {text}")
        return MCPToolResponse(result=text, node_id=self.node_id)

    async def _holder(self, servers: list[Server], tool: str) -> Server | str:
        """The server that offers `tool`, or the reason none does."""
        problems = []
        for server in servers:
            try:
                live = await self.pool.get(server)
            except SessionUnavailable as exc:
                problems.append(str(exc))
                continue
            if any(t.name == tool for t in live.tools):
                return server
        names = ", ".join(s.name for s in servers) or "none configured"
        detail = f" ({'; '.join(problems)})" if problems else ""
        return f"no MCP server of this model offers tool {tool!r} (servers: {names}){detail}"

    def _error(self, message: str) -> MCPToolResponse:
        return MCPToolResponse(error=message, node_id=self.node_id)
