"""The `mcp:` and `agent:` blocks of a model config (the reference's shape).

    mcp:
      stdio: |                      # a YAML/JSON document, as in the reference (a mapping is accepted too)
        {"mcpServers": {"tools": {"command": "python3", "args": ["server.py"], "env": {"K": "v"}}}}
      remote: |
        {"mcpServers": {"search": {"url": "https://mcp.example/mcp", "token": "..."}}}
    agent:
      max_iterations: 5             # model turns of the agent loop (tool call → result → model)

Stdio servers run as subprocesses of an agent worker; remote servers are reached over streamable HTTP
(or SSE when the URL path ends in `/sse`). The frontend only forwards this config, it never runs it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MAX_SERVERS = 32
MAX_ARGS = 256
MAX_ITERATIONS_CAP = 100


class MCPConfigError(ValueError):
    """The `mcp:` block is malformed; the message names the field and the fix."""


@dataclass(frozen=True)
class StdioServer:
    name: str
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    def wire(self) -> dict[str, Any]:
        return {"command": self.command, "args": list(self.args), "env": dict(self.env)}


@dataclass(frozen=True)
class RemoteServer:
    name: str
    url: str
    token: str = ""

    def wire(self) -> dict[str, Any]:
        return {"url": self.url, "token": self.token} if self.token else {"url": self.url}


@dataclass(frozen=True)
class MCPServers:
    stdio: tuple[StdioServer, ...] = ()
    remote: tuple[RemoteServer, ...] = ()
    max_iterations: int = 0  # 0: the frontend's --mcp-max-iterations

    def __bool__(self) -> bool:
        return bool(self.stdio or self.remote)

    def wire(self) -> dict[str, Any]:
        """The reference's `stdio_servers` / `remote_servers` payload fields (MCPGenericConfig)."""
        return {
            "stdio_servers": {"mcpServers": {s.name: s.wire() for s in self.stdio}},
            "remote_servers": {"mcpServers": {s.name: s.wire() for s in self.remote}},
        }


def _document(value: Any, field_name: str) -> dict[str, Any]:
    """`mcp.stdio` / `mcp.remote`: a YAML/JSON string (the reference) or a mapping, holding `mcpServers`."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise MCPConfigError(f"field {field_name!r} is not valid YAML/JSON: {exc}") from None
    if not isinstance(value, dict):
        raise MCPConfigError(f"field {field_name!r} must be a mapping with 'mcpServers'")
    servers = value.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise MCPConfigError(f"field '{field_name}.mcpServers' must map server names to their settings")
    if len(servers) > MAX_SERVERS:
        raise MCPConfigError(
            f"field '{field_name}.mcpServers' lists {len(servers)} servers; at most {MAX_SERVERS}"
        )
    for name, spec in servers.items():
        if not isinstance(name, str) or not SERVER_NAME.match(name):
            raise MCPConfigError(
                f"field '{field_name}.mcpServers': server name {name!r} must be 1-64 letters, "
                "digits, '.', '_' or '-' (no '/')"
            )
        if not isinstance(spec, dict):
            raise MCPConfigError(f"field '{field_name}.mcpServers.{name}' must be a mapping")
    return servers


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
        raise MCPConfigError(f"field '{where}' must be a list of strings")
    if len(value) > MAX_ARGS:
        raise MCPConfigError(f"field '{where}' has {len(value)} entries; at most {MAX_ARGS}")
    return tuple(str(v) for v in value)


def _stdio(name: str, spec: dict[str, Any]) -> StdioServer:
    where = f"mcp.stdio.mcpServers.{name}"
    command = spec.get("command")
    if not isinstance(command, str) or not command.strip():
        raise MCPConfigError(f"field '{where}.command' is required (the executable that starts the server)")
    env = spec.get("env") or {}
    if not isinstance(env, dict):
        raise MCPConfigError(f"field '{where}.env' must map variable names to values")
    return StdioServer(
        name=name,
        command=command,
        args=_strings(spec.get("args"), f"{where}.args"),
        env=tuple(sorted((str(k), str(v)) for k, v in env.items())),
    )


def _remote(name: str, spec: dict[str, Any]) -> RemoteServer:
    where = f"mcp.remote.mcpServers.{name}"
    url = spec.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise MCPConfigError(f"field '{where}.url' must be an http:// or https:// URL, got {url!r}")
    token = spec.get("token") or ""
    if not isinstance(token, str):
        raise MCPConfigError(f"field '{where}.token' must be a string")
    return RemoteServer(name=name, url=url, token=token)


def parse_mcp(mcp: Any, agent: Any) -> MCPServers:
    """The model's MCP servers (empty when it has none); raises MCPConfigError naming the field."""
    if mcp in (None, "", {}):
        return MCPServers()
    if not isinstance(mcp, dict):
        raise MCPConfigError("field 'mcp' must be a mapping with 'stdio' and/or 'remote'")
    unknown = sorted(set(mcp) - {"stdio", "remote"})
    if unknown:
        raise MCPConfigError(f"field 'mcp' has unknown keys {unknown}; use 'stdio' and/or 'remote'")
    stdio = [_stdio(n, s) for n, s in _document(mcp.get("stdio"), "mcp.stdio").items()]
    remote = [_remote(n, s) for n, s in _document(mcp.get("remote"), "mcp.remote").items()]
    clash = {s.name for s in stdio} & {r.name for r in remote}
    if clash:
        raise MCPConfigError(
            f"MCP server names {sorted(clash)} are both stdio and remote; give each a unique name"
        )
    return MCPServers(stdio=tuple(stdio), remote=tuple(remote), max_iterations=_max_iterations(agent))


def _max_iterations(agent: Any) -> int:
    if agent in (None, {}):
        return 0
    if not isinstance(agent, dict):
        raise MCPConfigError("field 'agent' must be a mapping (max_iterations)")
    value = agent.get("max_iterations", 0) or 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_ITERATIONS_CAP:
        raise MCPConfigError(
            f"field 'agent.max_iterations' must be an integer from 0 to {MAX_ITERATIONS_CAP}, got {value!r}"
        )
    return value


def from_wire(stdio_servers: Any, remote_servers: Any) -> MCPServers:
    """Parse the payload fields with the same checks as a model config (a worker trusts no payload)."""
    return parse_mcp({"stdio": stdio_servers or {}, "remote": remote_servers or {}}, None)
