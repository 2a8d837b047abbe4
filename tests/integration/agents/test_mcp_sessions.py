"""MCP sessions of an agent worker against real MCP servers (tests/support/mcp_tools_server.py): a stdio
subprocess reused across calls and started again when it dies, a tool cut at its deadline, and remote
servers over streamable HTTP and SSE."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from corral.agents.sessions import SessionPool, ToolTimeout
from corral.agents.tools import ToolService
from corral.bus.agent_messages import MCPDiscoveryRequest, MCPToolRequest
from corral.models.mcp import MCPServers, RemoteServer, StdioServer, from_wire
from corral.runtime.processes import free_port
from support.agent_workers import TOOLS_SERVER

pytestmark = pytest.mark.slow

STDIO = StdioServer(name="tools", command=sys.executable, args=(str(TOOLS_SERVER),))


def _server_pid(text: str) -> int:
    return int(text.split("pid=")[1].split()[0])


async def test_a_stdio_session_is_reused_and_started_again_when_its_server_dies() -> None:
    pool = SessionPool()
    try:
        first, _ = await pool.call_tool(STDIO, "whoami", {}, 10, "knob")
        second, _ = await pool.call_tool(STDIO, "whoami", {}, 10, "knob")
        assert _server_pid(first) == _server_pid(second)  # one subprocess serves every call
        assert f"ppid={os.getpid()}" in first  # a child of this process (the agent worker)
        os.kill(_server_pid(first), signal.SIGKILL)
        time.sleep(0.2)
        third, is_error = await pool.call_tool(STDIO, "add", {"a": 1, "b": 2}, 10, "knob")
        assert (third, is_error) == ("3", False)
        fourth, _ = await pool.call_tool(STDIO, "whoami", {}, 10, "knob")
        assert _server_pid(fourth) != _server_pid(first)
    finally:
        await pool.close_all()


async def test_the_least_recently_used_server_is_closed_past_the_session_cap() -> None:
    pool = SessionPool(max_sessions=1)
    other = StdioServer(name="other", command=sys.executable, args=(str(TOOLS_SERVER),), env=(("X", "1"),))
    try:
        first, _ = await pool.call_tool(STDIO, "whoami", {}, 10, "knob")
        await pool.call_tool(other, "whoami", {}, 10, "knob")
        deadline = time.monotonic() + 10
        while _alive(_server_pid(first)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(_server_pid(first))
    finally:
        await pool.close_all()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def test_a_hanging_tool_is_cut_at_its_deadline_and_the_session_serves_on() -> None:
    pool = SessionPool()
    try:
        await pool.get(STDIO)  # started already: the deadline is the tool's, not the server's start
        started = time.monotonic()
        with pytest.raises(
            ToolTimeout, match=r"'sleep' on server 'tools' did not answer within 0\.5s; raise KNOB"
        ):
            await pool.call_tool(STDIO, "sleep", {"seconds": 30}, 0.5, "KNOB")
        assert time.monotonic() - started < 15  # the tool sleeps 30 s
        assert await pool.call_tool(STDIO, "add", {"a": 2, "b": 2}, 10, "knob") == ("4", False)
    finally:
        await pool.close_all()


def authority(**by_model: dict[str, Any]) -> Callable[[str], Awaitable[MCPServers]]:
    """What the frontend would answer for each model (agents/authority.py), as wire payloads."""

    async def servers(model: str) -> MCPServers:
        if model not in by_model:
            raise LookupError(f"model {model!r} has no MCP servers")
        return from_wire(by_model[model].get("stdio_servers"), by_model[model].get("remote_servers"))

    return servers


WIRE = {"stdio_servers": {"mcpServers": {"tools": STDIO.wire()}}}


async def test_tool_service_answers_failures_as_errors() -> None:
    service = ToolService(
        SessionPool(),
        authority(
            m=WIRE,
            bad={"stdio_servers": {"mcpServers": {"a/b": {}}}},
            gone={"stdio_servers": {"mcpServers": {"gone": {"command": "/nonexistent/mcp-server"}}}},
        ),
        node_id="n1",
    )
    try:
        unknown = await service.execute(MCPToolRequest(model_name="m", tool_name="nope"))
        assert "no MCP server of this model offers tool 'nope'" in (unknown.error or "")
        failed = await service.execute(
            MCPToolRequest(model_name="m", tool_name="read_file", arguments={"path": "/nonexistent/x"})
        )
        assert "returned an error" in (failed.error or "") and failed.node_id == "n1"
        bad = await service.execute(MCPToolRequest(model_name="bad", tool_name="add"))
        assert "invalid MCP config" in (bad.error or "")
        none = await service.execute(MCPToolRequest(model_name="other", tool_name="add"))
        assert "model 'other' has no MCP servers" in (none.error or "")
        broken = await service.discover(MCPDiscoveryRequest(model_name="gone"))
        assert broken.servers is not None and broken.servers[0].error and broken.servers[0].tools == []
    finally:
        await service.pool.close_all()


async def test_a_server_config_in_the_payload_is_never_run(tmp_path: Path) -> None:
    """The bus names a model; what runs is that model's configured servers, not a command in the payload."""
    marker = tmp_path / "ran"
    forged: dict[str, Any] = {
        "stdio_servers": {"mcpServers": {"tools": {"command": "sh", "args": ["-c", f"touch {marker}"]}}}
    }
    service = ToolService(SessionPool(), authority(m=WIRE))
    try:
        answer = await service.execute(
            MCPToolRequest(model_name="m", tool_name="add", arguments={"a": 1, "b": 2}, **forged)
        )
        assert answer.result == "3", answer
        refused = await service.discover(MCPDiscoveryRequest(model_name="unconfigured", **forged))
        assert "has no MCP servers" in (refused.error or "")
        assert not marker.exists()
    finally:
        await service.pool.close_all()


@pytest.fixture(params=["streamable-http", "sse"])
def remote(request: pytest.FixtureRequest) -> Iterator[RemoteServer]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(TOOLS_SERVER), request.param, str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    path = "/mcp" if request.param == "streamable-http" else "/sse"
    url = f"http://127.0.0.1:{port}{path}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=0.5)
            break
        except httpx.HTTPError:
            time.sleep(0.1)
    try:
        yield RemoteServer(name="remote", url=url)
    finally:
        proc.terminate()
        proc.wait(10)


async def test_remote_servers_are_reached_over_streamable_http_and_sse(remote: RemoteServer) -> None:
    service = ToolService(
        SessionPool(), authority(r={"remote_servers": {"mcpServers": {"remote": remote.wire()}}})
    )
    try:
        found = await service.discover(MCPDiscoveryRequest(model_name="r"))
        assert (
            found.servers is not None
            and found.servers[0].type == "remote"
            and "add" in found.servers[0].tools
        )
        answer = await service.execute(
            MCPToolRequest(model_name="r", tool_name="add", arguments={"a": 5, "b": 6})
        )
        assert answer.result == "11", answer
    finally:
        await service.pool.close_all()
