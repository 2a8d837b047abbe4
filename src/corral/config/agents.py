"""Settings of MCP on the frontend and of `corral agent-worker` (spec: Agent Workers)."""

from __future__ import annotations

from corral.config.parse import (
    parse_duration_s,
    parse_http_url,
    parse_int,
    parse_nats_url,
    parse_positive_duration_s,
)
from corral.config.process import ProcessSettings
from corral.config.security import NodeLifecycleSettings
from corral.config.settings import setting, settings_class


def _iterations(raw: str) -> int:
    value = parse_int(raw)
    if not 1 <= value <= 100:
        raise ValueError(f"{raw!r} must be from 1 to 100")
    return value


def mcp_tool_timeout() -> float:
    """The --mcp-tool-timeout field (typed as its value, as `setting` is): one declaration for the frontend's
    and the agent worker's settings."""
    return setting(
        "--mcp-tool-timeout",
        "CORRAL_MCP_TOOL_TIMEOUT",
        default=360.0,
        parse=parse_positive_duration_s,
        help="an MCP tool call running longer is cut and reported to the model as an error",
    )


@settings_class
class FrontendAgentSettings:
    """MCP on the frontend: tool-call turns, tool and discovery deadlines."""

    mcp_max_iterations: int = setting(
        "--mcp-max-iterations",
        "CORRAL_MCP_MAX_ITERATIONS",
        default=10,
        parse=_iterations,
        help="model turns with tool calls in one chat completion of a model with `mcp:` servers (a model's "
        "agent.max_iterations overrides it)",
    )
    mcp_tool_timeout_s: float = mcp_tool_timeout()
    mcp_discovery_timeout_s: float = setting(
        "--mcp-discovery-timeout",
        "CORRAL_MCP_DISCOVERY_TIMEOUT",
        default=60.0,
        parse=parse_positive_duration_s,
        help="how long an agent worker may take to list a model's MCP servers and tools",
    )


@settings_class
class AgentWorkerSettings(ProcessSettings, NodeLifecycleSettings):
    """`corral agent-worker`: NATS JWT/TLS, node credential state dir, registration attempts and drain
    timeout as for backend workers."""

    register_to: str = setting(
        "--register-to",
        "LOCALAI_REGISTER_TO",
        parse=parse_http_url,
        help="frontend base URL to register with (http://frontend:8080)",
        required=True,
    )
    nats_url: str = setting(
        "--nats-url",
        "LOCALAI_NATS_URL",
        parse=parse_nats_url,
        help="NATS server URL (nats:// or tls://)",
        required=True,
    )
    registration_token: str = setting(
        "--registration-token",
        "LOCALAI_REGISTRATION_TOKEN",
        default="",
        help="shared secret from the frontend's --registration-token",
        secret=True,
    )
    node_name: str = setting(
        "--node-name",
        "LOCALAI_NODE_NAME",
        default="",
        help="node identity in the registry (default: agent-<hostname>)",
    )
    heartbeat_interval_s: float = setting(
        "--heartbeat-interval",
        "LOCALAI_HEARTBEAT_INTERVAL",
        default=10.0,
        parse=parse_duration_s,
        help="interval between heartbeats to the frontend",
    )
    api_url: str = setting(
        "--api-url",
        "LOCALAI_API_URL",
        default="",
        help="API base URL for the model calls of agent jobs (default: --register-to)",
    )
    api_token: str = setting(
        "--api-token",
        "LOCALAI_API_TOKEN",
        default="",
        help="API key for those calls (default: the key provisioned at registration)",
        secret=True,
    )
    subject: str = setting(
        "--subject", "LOCALAI_AGENT_SUBJECT", default="agent.execute", help="NATS subject of agent chats"
    )
    queue: str = setting(
        "--queue", "LOCALAI_AGENT_QUEUE", default="agent-workers", help="NATS queue group of agent workers"
    )
    mcp_ci_job_timeout_s: float = setting(
        "--mcp-ci-job-timeout",
        "LOCALAI_MCP_CI_JOB_TIMEOUT",
        default=600.0,
        parse=parse_positive_duration_s,
        help="an agent job (MCP CI job or agent chat) running longer is cancelled",
    )
    mcp_tool_timeout_s: float = mcp_tool_timeout()
    mcp_start_timeout_s: float = setting(
        "--mcp-start-timeout",
        "CORRAL_MCP_START_TIMEOUT",
        default=30.0,
        parse=parse_positive_duration_s,
        help="how long an MCP server may take to start and answer `initialize` (stdio: the subprocess)",
    )
    log_level: str = setting(
        "--log-level", "LOCALAI_LOG_LEVEL", default="info", help="debug, info, warning or error"
    )
