"""The frontend's side of the agent-worker subjects: NATS request-reply to the `agent-workers` queue group.

NATS delivers each request to one live member of the group, so a worker that left (SIGTERM, crash) gets
no more requests; with no member at all the request fails at once with "no responders".
"""

from __future__ import annotations

from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from corral.bus import subjects
from corral.bus.agent_messages import (
    MCPDiscoveryRequest,
    MCPDiscoveryResponse,
    MCPToolRequest,
    MCPToolResponse,
)
from corral.models.mcp import MCPServers

REPLY_MARGIN_S = 5.0  # the worker cuts a tool at the deadline; this is for its answer to travel back
START_AGENT_WORKER = (
    "start one with `corral agent-worker --register-to <frontend URL> --nats-url <NATS URL> "
    "--registration-token <token>`"
)


class NoAgentWorker(Exception):
    """No agent worker listens on the queue group."""


class AgentTimeout(Exception):
    """An agent worker did not answer within the budget; the message names the knob."""


class AgentBus:
    def __init__(self, nc: Client, *, tool_timeout_s: float, discovery_timeout_s: float) -> None:
        self.nc = nc
        self.tool_timeout_s = tool_timeout_s
        self.discovery_timeout_s = discovery_timeout_s

    async def _request(self, subject: str, payload: bytes, timeout_s: float, what: str, knob: str) -> bytes:
        try:
            msg = await self.nc.request(subject, payload, timeout=timeout_s)
        except NoRespondersError:
            raise NoAgentWorker(f"no agent worker is connected to run {what}; {START_AGENT_WORKER}") from None
        except NatsTimeout:
            raise AgentTimeout(
                f"no agent worker answered {what} within {timeout_s:g}s; raise {knob}"
            ) from None
        return bytes(msg.data)

    async def discover(self, model: str, servers: MCPServers) -> MCPDiscoveryResponse:
        req = MCPDiscoveryRequest(model_name=model, **servers.wire())
        data = await self._request(
            subjects.MCP_DISCOVERY,
            req.to_json(),
            self.discovery_timeout_s,
            f"the MCP discovery of model {model}",
            "--mcp-discovery-timeout / CORRAL_MCP_DISCOVERY_TIMEOUT",
        )
        return MCPDiscoveryResponse.from_json(data)

    async def execute(
        self, model: str, servers: MCPServers, tool: str, arguments: dict[str, object]
    ) -> MCPToolResponse:
        req = MCPToolRequest(
            model_name=model,
            tool_name=tool,
            arguments=arguments,
            timeout_s=self.tool_timeout_s,
            **servers.wire(),
        )
        data = await self._request(
            subjects.MCP_TOOLS_EXECUTE,
            req.to_json(),
            self.tool_timeout_s + REPLY_MARGIN_S,
            f"MCP tool {tool!r} of model {model}",
            "--mcp-tool-timeout / CORRAL_MCP_TOOL_TIMEOUT",
        )
        return MCPToolResponse.from_json(data)
