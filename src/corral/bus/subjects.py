"""NATS subject builders (reference §3). Tokens are sanitised so IDs cannot inject wildcards."""

from __future__ import annotations

# every character str.isspace() holds (a subject holds no whitespace), the separator and the wildcards
_WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680"
    + "".join(map(chr, range(0x2000, 0x200B)))
    + "\u2028\u2029\u202f\u205f\u3000"
)
_UNSAFE = str.maketrans(dict.fromkeys(".*>" + _WHITESPACE, "-"))


def token(value: str) -> str:
    return value.translate(_UNSAFE)


def node_subject(node_id: str, suffix: str) -> str:
    return f"nodes.{token(node_id)}.{suffix}"


def backend_install(node_id: str) -> str:
    return node_subject(node_id, "backend.install")


def backend_install_progress(node_id: str, op_id: str) -> str:
    return node_subject(node_id, f"backend.install.{token(op_id)}.progress")


def backend_upgrade(node_id: str) -> str:
    return node_subject(node_id, "backend.upgrade")


def backend_delete(node_id: str) -> str:
    return node_subject(node_id, "backend.delete")


def backend_list(node_id: str) -> str:
    return node_subject(node_id, "backend.list")


def backend_stop(node_id: str) -> str:
    return node_subject(node_id, "backend.stop")


def model_stop(node_id: str) -> str:
    return node_subject(node_id, "model.stop")


def models_running(node_id: str) -> str:
    return node_subject(node_id, "models.running")


def node_stop(node_id: str) -> str:
    return node_subject(node_id, "stop")


def model_unload(node_id: str) -> str:
    return node_subject(node_id, "model.unload")


def model_delete(node_id: str) -> str:
    return node_subject(node_id, "model.delete")


def backend_logs(node_id: str) -> str:
    """Request/reply: a snapshot of the worker's backend logs (corral's own subject; see worker/log_handlers)."""
    return node_subject(node_id, "backend.logs")


def backend_log_lines(node_id: str, model_id: str) -> str:
    """Worker → frontends: live lines of one model's backend processes."""
    return node_subject(node_id, f"backend.logs.{token(model_id)}.lines")


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


def key_limit_counts() -> str:
    """Each frontend's requests and tokens per rate-limited API key since its last publish (tenancy/limits.py)."""
    return "state.api-keys.limit-counts"


def model_load_reports() -> str:
    """Each frontend's per-model queue figures (depth, wait and TTFT p95) for the autoscaler (replicas/load_reports.py)."""
    return "state.models.queue-load"
