"""Settings of `corral run` (the frontend). Names follow the specification's flags and env vars."""

from __future__ import annotations

from corral.config.parse import (
    parse_bool,
    parse_duration_s,
    parse_host_port,
    parse_nats_url,
    parse_postgres_url,
)
from corral.config.scheduling import FRONTEND_SCHEDULING_SETTINGS
from corral.config.security import FRONTEND_LIFECYCLE_SETTINGS
from corral.config.settings import Setting
from corral.config.staging import FRONTEND_STAGING_SETTINGS


def _optional_duration_s(raw: str) -> float | None:
    return parse_duration_s(raw) if raw.strip() else None


FRONTEND_SETTINGS: tuple[Setting, ...] = (
    Setting("address", "--address", ("LOCALAI_ADDRESS",), "0.0.0.0:8080", parse_host_port,
            "HTTP listen address of the API (host:port)"),
    Setting("nats_url", "--nats-url", ("LOCALAI_NATS_URL",), None, parse_nats_url,
            "NATS server URL (nats:// or tls://)", required=True),
    Setting("database_url", "--database-url", ("LOCALAI_AUTH_DATABASE_URL", "DATABASE_URL"), None,
            parse_postgres_url, "PostgreSQL URL holding all shared state", required=True),
    Setting("registration_token", "--registration-token", ("LOCALAI_REGISTRATION_TOKEN",), "",
            help="shared secret workers present on /api/node/*, file server and backend gRPC", secret=True),
    Setting("auto_approve_nodes", "--auto-approve-nodes", ("LOCALAI_AUTO_APPROVE_NODES",), False, parse_bool,
            "new worker nodes are healthy at once instead of pending approval", is_switch=True),
    Setting("models_path", "--models-path", ("LOCALAI_MODELS_PATH",), "./models",
            help="directory of model config YAMLs and model files"),
    Setting("backend_install_timeout_s", "--backend-install-timeout",
            ("LOCALAI_NATS_BACKEND_INSTALL_TIMEOUT",), 15 * 60.0, parse_duration_s,
            "how long to wait for a worker to answer backend.install"),
    Setting("model_load_timeout_s", "--model-load-timeout", ("LOCALAI_NATS_MODEL_LOAD_TIMEOUT",), None,
            _optional_duration_s, "LoadModel deadline; unset = 5m + 20s per GiB of checkpoint, capped at 6h"),
    Setting("model_load_wait_s", "--model-load-wait", ("LOCALAI_MODEL_LOAD_WAIT",), 60.0, parse_duration_s,
            "how long a request waits for its model to load (0 = no bound)"),
    Setting("load_stall_window_s", "--load-stall-window", ("CORRAL_LOAD_STALL_WINDOW",), 300.0, parse_duration_s,
            "a staging load with no progress for this long is abandoned"),
    Setting("load_orphan_window_s", "--load-orphan-window", ("CORRAL_LOAD_ORPHAN_WINDOW",), 60.0, parse_duration_s,
            "a load job whose frontend stopped heartbeating for this long is taken over"),
    Setting("disk_headroom_check", "--distributed-disk-headroom-check",
            ("LOCALAI_DISTRIBUTED_DISK_HEADROOM_CHECK",), None, parse_bool,
            "refuse to place a model on nodes whose models filesystem cannot hold it (false = warn only); "
            "also settable at runtime via POST /api/settings", is_switch=True),
    Setting("expose_node_header", "--expose-node-header", ("LOCALAI_EXPOSE_NODE_HEADER",), False, parse_bool,
            "add X-LocalAI-Node: <node id> to inference responses", is_switch=True),
    Setting("eviction_wait_s", "--eviction-wait", ("CORRAL_EVICTION_WAIT",), 30.0, parse_duration_s,
            "when every replica is busy, how long a load waits for one to go idle before failing"),
    # issue 10 item 6: no hang on the backend path (routing/backend_client.py, routing/calls.py)
    Setting("backend_call_timeout_s", "--backend-call-timeout", ("CORRAL_BACKEND_CALL_TIMEOUT",), 600.0,
            parse_duration_s, "deadline of one unary backend call (Predict, Embedding); past it: 504"),
    Setting("stream_first_token_timeout_s", "--stream-first-token-timeout", ("CORRAL_STREAM_FIRST_TOKEN_TIMEOUT",),
            300.0, parse_duration_s, "how long a stream may wait for its first token (prompt processing)"),
    Setting("stream_idle_timeout_s", "--stream-idle-timeout", ("CORRAL_STREAM_IDLE_TIMEOUT",), 60.0,
            parse_duration_s, "a stream that sends nothing for this long after its first token ends with an error"),
    Setting("backend_probe_timeout_s", "--backend-probe-timeout", ("CORRAL_BACKEND_PROBE_TIMEOUT",), 2.0,
            parse_duration_s, "after a backend timeout, the replica's Health probe deadline; fail it and the "
            "replica is dropped"),
    Setting("backend_keepalive_s", "--backend-keepalive", ("CORRAL_BACKEND_KEEPALIVE",), 20.0, parse_duration_s,
            "gRPC keepalive ping interval on backend channels; a ping unanswered as long fails the calls"),
    Setting("log_level", "--log-level", ("LOCALAI_LOG_LEVEL",), "info", help="debug, info, warning or error"),
)
FRONTEND_SETTINGS += FRONTEND_LIFECYCLE_SETTINGS  # issue 5: node lifecycle, health, security
FRONTEND_SETTINGS += FRONTEND_STAGING_SETTINGS  # issue 4: staging modes, S3, Hugging Face
FRONTEND_SETTINGS += FRONTEND_SCHEDULING_SETTINGS  # issue 6: scheduling rules, replica reconciler
