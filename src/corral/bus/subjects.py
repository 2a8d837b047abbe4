"""NATS subject builders (reference §3). Tokens are sanitised so IDs cannot inject wildcards."""

from __future__ import annotations

_UNSAFE = str.maketrans({".": "-", "*": "-", ">": "-", " ": "-", "\t": "-", "\n": "-"})


def token(value: str) -> str:
    return value.translate(_UNSAFE)


def node_subject(node_id: str, suffix: str) -> str:
    return f"nodes.{token(node_id)}.{suffix}"


def backend_install(node_id: str) -> str:
    return node_subject(node_id, "backend.install")


def backend_stop(node_id: str) -> str:
    return node_subject(node_id, "backend.stop")


def model_stop(node_id: str) -> str:
    return node_subject(node_id, "model.stop")


def models_running(node_id: str) -> str:
    return node_subject(node_id, "models.running")


def node_stop(node_id: str) -> str:
    return node_subject(node_id, "stop")


# Agent workers (reference §3.3): request-reply and job subjects served by the `agent-workers` queue group.
AGENT_QUEUE = "agent-workers"
MCP_TOOLS_EXECUTE = "mcp.tools.execute"
MCP_DISCOVERY = "mcp.discovery"
AGENT_EXECUTE = "agent.execute"
MCP_CI_JOBS_NEW = "jobs.mcp-ci.new"


def job_progress(job_id: str) -> str:
    return f"jobs.{token(job_id)}.progress"


def job_result(job_id: str) -> str:
    return f"jobs.{token(job_id)}.result"


def job_cancel(job_id: str) -> str:
    return f"jobs.{token(job_id)}.cancel"


def agent_cancel(job_id: str) -> str:
    return f"agent.{token(job_id)}.cancel"


def agent_events(name: str, user: str) -> str:
    return f"agent.{token(name)}.events.{token(user)}"
