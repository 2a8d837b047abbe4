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
from corral.config.settings import Setting

BACKENDS_PATH_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "backends_path",
        "--backends-path",
        ("LOCALAI_BACKENDS_PATH",),
        "./backends",
        help="where installed backends live (one directory each, with run.sh)",
    ),
    Setting(
        "backends_system_path",
        "--backends-system-path",
        ("LOCALAI_BACKENDS_SYSTEM_PATH",),
        "/var/lib/local-ai/backends",
        help="system-wide installed backends, searched after --backends-path",
    ),
)

FOLLOWER_REGISTRATION_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "register_to",
        "--register-to",
        ("LOCALAI_REGISTER_TO",),
        "",
        parse_optional_http_url,
        "frontend URL to register with (empty: run vLLM only, invisible to the admin API)",
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
        help="node name in the registry (default: vllm-<hostname>)",
    ),
    Setting(
        "node_labels",
        "--node-labels",
        ("LOCALAI_NODE_LABELS",),
        {},
        parse_labels,
        "labels k=v,k2=v2 (node.role=vllm-follower is always added)",
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
        "state_dir",
        "--state-dir",
        ("CORRAL_WORKER_STATE_DIR",),
        "",
        help="where the node credential is kept (default: ./.corral-worker)",
    ),
)


VLLM_FOLLOWER_SETTINGS: tuple[Setting, ...] = (
    (
        Setting(
            "data_parallel_size",
            "--data-parallel-size",
            ("VLLM_DATA_PARALLEL_SIZE",),
            None,
            parse_positive_int,
            "total data-parallel ranks across all nodes (must match the head)",
            required=True,
        ),
        Setting(
            "data_parallel_size_local",
            "--data-parallel-size-local",
            ("VLLM_DATA_PARALLEL_SIZE_LOCAL",),
            None,
            parse_positive_int,
            "data-parallel ranks on this node",
            required=True,
        ),
        Setting(
            "start_rank",
            "--start-rank",
            ("VLLM_DATA_PARALLEL_START_RANK",),
            None,
            parse_non_negative_int,
            "first data-parallel rank of this node (>0 for followers)",
            required=True,
        ),
        Setting(
            "master_addr",
            "--master-addr",
            ("VLLM_DP_MASTER_ADDR",),
            None,
            help="head node IP or hostname for the data-parallel RPC handshake",
            required=True,
        ),
        Setting(
            "master_port",
            "--master-port",
            ("VLLM_DP_MASTER_PORT",),
            None,
            parse_port,
            "head node data-parallel RPC port (its engine_args.data_parallel_rpc_port)",
            required=True,
        ),
        Setting(
            "headless",
            "--headless",
            ("VLLM_HEADLESS",),
            True,
            parse_bool,
            "headless follower (no API server); false only for a head started this way",
            is_switch=True,
        ),
        Setting(
            "log_level", "--log-level", ("LOCALAI_LOG_LEVEL",), "info", help="debug, info, warning or error"
        ),
    )
    + FOLLOWER_REGISTRATION_SETTINGS
    + BACKENDS_PATH_SETTINGS
)

DS4_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "ds4_args",
        "--ds4-args",
        ("LOCALAI_EXTRA_DS4_ARGS", "EXTRA_DS4_ARGS"),
        "",
        help="arguments for ds4-worker when none follow `--` (e.g. '--role worker --model m.gguf "
        "--layers 20:output --coordinator HOST PORT')",
    ),
    Setting("log_level", "--log-level", ("LOCALAI_LOG_LEVEL",), "info", help="debug, info, warning or error"),
) + BACKENDS_PATH_SETTINGS
