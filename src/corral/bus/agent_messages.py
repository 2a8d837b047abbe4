"""Typed payloads of the agent-worker subjects, with the reference's JSON field names (core/services/mcp,
core/services/jobs). Server configs travel as `MCPGenericConfig`: {"mcpServers": {name: {...}}}."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from corral.bus.messages import INT32_MAX, Message

TRACE_MAX = INT32_MAX  # entries of one job's trace


class MCPServersPayload(Message):
    model_name: str = ""
    remote_servers: dict[str, Any] = {}
    stdio_servers: dict[str, Any] = {}


class MCPToolRequest(MCPServersPayload):
    tool_name: str = ""
    arguments: dict[str, Any] | None = None
    timeout_s: float | None = None  # corral: the frontend's tool deadline, so both ends cut at the same bound


class MCPToolResponse(Message):
    result: str | None = None
    error: str | None = None
    node_id: str | None = None  # corral: which agent worker ran the tool (operators and tests see where)


class MCPDiscoveryRequest(MCPServersPayload):
    pass


class MCPServerInfo(Message):
    name: str = ""
    type: str = ""
    tools: list[str] = []
    prompts: list[str] | None = None
    resources: list[str] | None = None
    error: str | None = None


class MCPToolDef(Message):
    server_name: str = ""
    tool_name: str = ""
    function: dict[str, Any] = {}


class MCPDiscoveryResponse(Message):
    servers: list[MCPServerInfo] | None = None
    tools: list[MCPToolDef] | None = None
    error: str | None = None
    node_id: str | None = None


class AgentJob(MCPServersPayload):
    """`jobs.mcp-ci.new` and `agent.execute`: run the agent loop on a worker (model calls go back to the
    frontend's /v1/chat/completions with the worker's provisioned API key, tools run on the worker)."""

    job_id: str = ""
    model: str = ""
    prompt: str = ""
    messages: list[dict[str, Any]] | None = None
    max_iterations: int = 0
    timeout_s: float | None = None


class JobProgress(Message):
    job_id: str = ""
    status: str | None = None
    message: str | None = None
    trace_type: str | None = None
    trace_content: str | None = None
    node_id: str | None = None
    trace_seq: int | None = Field(
        default=None, ge=1, le=TRACE_MAX
    )  # corral: the entry's place in the trace (1, 2, …)


class JobResult(Message):
    job_id: str = ""
    status: str = ""
    result: str | None = None
    error: str | None = None
    node_id: str | None = None
    # corral: how many trace entries the job published, so a recorder still takes one that arrives after this
    trace_count: int | None = Field(default=None, ge=0, le=TRACE_MAX)
