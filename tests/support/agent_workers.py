"""Start `corral agent-worker` processes and write models with `mcp:` servers for end-to-end tests."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from support.cluster import Cluster, Proc, spawn

TOOLS_SERVER = Path(__file__).with_name("mcp_tools_server.py")


def mcp_model_yaml(name: str, *, max_iterations: int = 0, engine: str = "backend: simulator\n") -> str:
    """A model (`engine`: its backend lines; the simulator by default) whose MCP stdio server is
    tests/support/mcp_tools_server.py (the reference's shape: `mcp.stdio` holds a JSON document)."""
    stdio = json.dumps({"mcpServers": {"tools": {"command": sys.executable, "args": [str(TOOLS_SERVER)]}}})
    agent = f"agent:\n  max_iterations: {max_iterations}\n" if max_iterations else ""
    return f"name: {name}\n{engine}mcp:\n  stdio: '{stdio}'\n{agent}"


def agent_worker_argv(cluster: Cluster, name: str, *extra: str) -> list[str]:
    return [
        "agent-worker",
        "--register-to",
        cluster.frontend_url,
        "--nats-url",
        cluster.nats_url,
        "--registration-token",
        cluster.token,
        "--node-name",
        name,
        "--state-dir",
        str(cluster.root / name),
        "--heartbeat-interval",
        "2s",
        "--log-level",
        "debug",
        *extra,
    ]


def start_agent_worker(cluster: Cluster, name: str, *extra: str, wait: bool = True) -> Proc:
    proc = spawn(name, agent_worker_argv(cluster, name, *extra), cluster.root / "logs")
    cluster.workers.append(proc)
    if wait:
        wait_ready(proc)
    return proc


def wait_ready(proc: Proc, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if "ready: queue" in proc.log():
            return
        if proc.popen.poll() is not None:
            raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.log()[-3000:]}")
        time.sleep(0.1)
    raise RuntimeError(f"{proc.name} not ready after {timeout_s}s:\n{proc.log()[-3000:]}")
