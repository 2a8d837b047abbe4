"""Settings of MCP on the frontend and of `corral agent-worker` (spec: Agent Workers)."""

from __future__ import annotations

from corral.config.parse import (
    parse_duration_s,
    parse_http_url,
    parse_int,
    parse_nats_url,
    parse_positive_duration_s,
)
from corral.config.process import SLOW_CALLBACK_SETTING
from corral.config.security import WORKER_LIFECYCLE_SETTINGS
from corral.config.settings import Setting


def _iterations(raw: str) -> int:
    value = parse_int(raw)
    if not 1 <= value <= 100:
        raise ValueError(f"{raw!r} must be from 1 to 100")
    return value


TOOL_TIMEOUT = Setting(
    "mcp_tool_timeout_s",
    "--mcp-tool-timeout",
    ("CORRAL_MCP_TOOL_TIMEOUT",),
    360.0,
    parse_positive_duration_s,
    "an MCP tool call running longer is cut and reported to the model as an error",
)

FRONTEND_AGENT_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "mcp_max_iterations",
        "--mcp-max-iterations",
        ("CORRAL_MCP_MAX_ITERATIONS",),
        10,
        _iterations,
        "model turns with tool calls in one chat completion of a model with `mcp:` servers (a model's "
        "agent.max_iterations overrides it)",
    ),
    TOOL_TIMEOUT,
    Setting(
        "mcp_discovery_timeout_s",
        "--mcp-discovery-timeout",
        ("CORRAL_MCP_DISCOVERY_TIMEOUT",),
        60.0,
        parse_positive_duration_s,
        "how long an agent worker may take to list a model's MCP servers and tools",
    ),
)

AGENT_WORKER_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "register_to",
        "--register-to",
        ("LOCALAI_REGISTER_TO",),
        None,
        parse_http_url,
        "frontend base URL to register with (http://frontend:8080)",
        required=True,
    ),
    Setting(
        "nats_url",
        "--nats-url",
        ("LOCALAI_NATS_URL",),
        None,
        parse_nats_url,
        "NATS server URL (nats:// or tls://)",
        required=True,
    ),
    Setting(
        "registration_token",
        "--registration-token",
        ("LOCALAI_REGISTRATION_TOKEN",),
        "",
        help="shared secret from the frontend's --registration-token",
        secret=True,
    ),
    Setting(
        "node_name",
        "--node-name",
        ("LOCALAI_NODE_NAME",),
        "",
        help="node identity in the registry (default: agent-<hostname>)",
    ),
    Setting(
        "heartbeat_interval_s",
        "--heartbeat-interval",
        ("LOCALAI_HEARTBEAT_INTERVAL",),
        10.0,
        parse_duration_s,
        "interval between heartbeats to the frontend",
    ),
    Setting(
        "api_url",
        "--api-url",
        ("LOCALAI_API_URL",),
        "",
        help="API base URL for the model calls of agent jobs (default: --register-to)",
    ),
    Setting(
        "api_token",
        "--api-token",
        ("LOCALAI_API_TOKEN",),
        "",
        help="API key for those calls (default: the key provisioned at registration)",
        secret=True,
    ),
    Setting(
        "subject",
        "--subject",
        ("LOCALAI_AGENT_SUBJECT",),
        "agent.execute",
        help="NATS subject of agent chats",
    ),
    Setting(
        "queue",
        "--queue",
        ("LOCALAI_AGENT_QUEUE",),
        "agent-workers",
        help="NATS queue group of agent workers",
    ),
    Setting(
        "mcp_ci_job_timeout_s",
        "--mcp-ci-job-timeout",
        ("LOCALAI_MCP_CI_JOB_TIMEOUT",),
        600.0,
        parse_positive_duration_s,
        "an agent job (MCP CI job or agent chat) running longer is cancelled",
    ),
    TOOL_TIMEOUT,
    Setting(
        "mcp_start_timeout_s",
        "--mcp-start-timeout",
        ("CORRAL_MCP_START_TIMEOUT",),
        30.0,
        parse_positive_duration_s,
        "how long an MCP server may take to start and answer `initialize` (stdio: the subprocess)",
    ),
    Setting("log_level", "--log-level", ("LOCALAI_LOG_LEVEL",), "info", help="debug, info, warning or error"),
    SLOW_CALLBACK_SETTING,
)
# NATS JWT/TLS, node credential state dir, registration attempts, drain timeout: as for backend workers.
AGENT_WORKER_SETTINGS += tuple(s for s in WORKER_LIFECYCLE_SETTINGS if s.name != "sysfs_root")
