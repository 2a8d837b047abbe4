"""Settings of the operator-launched followers: `corral p2p-worker vllm` and `corral worker ds4-distributed`.

Flag and env var names are the specification's (vLLM's own `VLLM_*` names for the topology).
"""

from __future__ import annotations

from corral.config.parse import (
    parse_bool,
    parse_duration_s,
    parse_labels,
    parse_non_negative_int,
    parse_optional_http_url,
    parse_port,
    parse_positive_int,
)
from corral.config.settings import setting, settings_class


@settings_class
class BackendsPathSettings:
    """Where installed backends are found."""

    backends_path: str = setting(
        "--backends-path",
        "LOCALAI_BACKENDS_PATH",
        default="./backends",
        help="where installed backends live (one directory each, with run.sh)",
    )
    backends_system_path: str = setting(
        "--backends-system-path",
        "LOCALAI_BACKENDS_SYSTEM_PATH",
        default="/var/lib/local-ai/backends",
        help="system-wide installed backends, searched after --backends-path",
    )


@settings_class
class FollowerRegistrationSettings:
    """A follower's registration with the frontend (optional)."""

    register_to: str = setting(
        "--register-to",
        "LOCALAI_REGISTER_TO",
        default="",
        parse=parse_optional_http_url,
        help="frontend URL to register with (empty: run vLLM only, invisible to the admin API)",
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
        help="node name in the registry (default: vllm-<hostname>)",
    )
    node_labels: dict[str, str] = setting(
        "--node-labels",
        "LOCALAI_NODE_LABELS",
        default={},
        parse=parse_labels,
        help="labels k=v,k2=v2 (node.role=vllm-follower is always added)",
    )
    heartbeat_interval_s: float = setting(
        "--heartbeat-interval",
        "LOCALAI_HEARTBEAT_INTERVAL",
        default=10.0,
        parse=parse_duration_s,
        help="interval between heartbeats to the frontend",
    )
    state_dir: str = setting(
        "--state-dir",
        "CORRAL_WORKER_STATE_DIR",
        default="",
        help="where the node credential is kept (default: ./.corral-worker)",
    )


@settings_class
class VllmFollowerSettings(FollowerRegistrationSettings, BackendsPathSettings):
    """`corral p2p-worker vllm`."""

    data_parallel_size: int = setting(
        "--data-parallel-size",
        "VLLM_DATA_PARALLEL_SIZE",
        parse=parse_positive_int,
        help="total data-parallel ranks across all nodes (must match the head)",
        required=True,
    )
    data_parallel_size_local: int = setting(
        "--data-parallel-size-local",
        "VLLM_DATA_PARALLEL_SIZE_LOCAL",
        parse=parse_positive_int,
        help="data-parallel ranks on this node",
        required=True,
    )
    start_rank: int = setting(
        "--start-rank",
        "VLLM_DATA_PARALLEL_START_RANK",
        parse=parse_non_negative_int,
        help="first data-parallel rank of this node (>0 for followers)",
        required=True,
    )
    master_addr: str = setting(
        "--master-addr",
        "VLLM_DP_MASTER_ADDR",
        help="head node IP or hostname for the data-parallel RPC handshake",
        required=True,
    )
    master_port: int = setting(
        "--master-port",
        "VLLM_DP_MASTER_PORT",
        parse=parse_port,
        help="head node data-parallel RPC port (its engine_args.data_parallel_rpc_port)",
        required=True,
    )
    headless: bool = setting(
        "--headless",
        "VLLM_HEADLESS",
        default=True,
        parse=parse_bool,
        help="headless follower (no API server); false only for a head started this way",
        is_switch=True,
    )
    log_level: str = setting(
        "--log-level", "LOCALAI_LOG_LEVEL", default="info", help="debug, info, warning or error"
    )


@settings_class
class Ds4Settings(BackendsPathSettings):
    """`corral worker ds4-distributed`."""

    ds4_args: str = setting(
        "--ds4-args",
        ("LOCALAI_EXTRA_DS4_ARGS", "EXTRA_DS4_ARGS"),
        default="",
        help="arguments for ds4-worker when none follow `--` (e.g. '--role worker --model m.gguf "
        "--layers 20:output --coordinator HOST PORT')",
    )
    log_level: str = setting(
        "--log-level", "LOCALAI_LOG_LEVEL", default="info", help="debug, info, warning or error"
    )
