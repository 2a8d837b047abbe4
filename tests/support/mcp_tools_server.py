"""A real MCP stdio server for the agent tests (official SDK's MCPServer, the v2 name of FastMCP).

Tools: `add` (a calculator), `read_file` (a file's text), `whoami` (which process runs the tools:
its pid, its parent's pid and CORRAL_TEST_AGENT_MARK from the environment it inherited) and
`sleep` (hangs for the given seconds: the deadline test). Stdio by default; `streamable-http PORT` or
`sse PORT` serve it as a remote server on 127.0.0.1.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer

server = MCPServer("corral-test-tools")


@server.tool()
def add(a: float, b: float) -> str:
    """Add two numbers."""
    total = a + b
    return str(int(total) if total == int(total) else total)


@server.tool()
def read_file(path: str) -> str:
    """Return the text of a file."""
    return Path(path).read_text()


@server.tool()
def whoami() -> str:
    """Which process runs this tool, and under which agent worker."""
    return f"pid={os.getpid()} ppid={os.getppid()} mark={os.environ.get('CORRAL_TEST_AGENT_MARK', '')}"


@server.tool()
def sleep(seconds: float) -> str:
    """Sleep (a tool that hangs)."""
    time.sleep(seconds)
    return f"slept {seconds}"


if __name__ == "__main__":
    import sys

    if len(sys.argv) > 2:  # `streamable-http PORT` (path /mcp) or `sse PORT` (path /sse): a remote server
        server.run(sys.argv[1], host="127.0.0.1", port=int(sys.argv[2]))  # type: ignore[call-overload]
    else:
        server.run("stdio")
