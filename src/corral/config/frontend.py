"""Settings of `corral run` (the frontend). Names follow the specification's flags and env vars."""

from __future__ import annotations

from corral.config.admission import FRONTEND_ADMISSION_SETTINGS
from corral.config.agents import FRONTEND_AGENT_SETTINGS
from corral.config.parse import (
    parse_bool,
    parse_duration_s,
    parse_host_port,
    parse_nats_url,
    parse_path_list,
    parse_positive_duration_s,
    parse_positive_int,
    parse_postgres_url,
)
from corral.config.process import SLOW_CALLBACK_SETTING, parse_http_workers
from corral.config.responses import FRONTEND_RESPONSES_SETTINGS
from corral.config.scheduling import FRONTEND_SCHEDULING_SETTINGS
from corral.config.security import FRONTEND_LIFECYCLE_SETTINGS
from corral.config.settings import Setting
from corral.config.sizes import parse_size_bytes
from corral.config.staging import FRONTEND_STAGING_SETTINGS


def _optional_duration_s(raw: str) -> float | None:
    return parse_duration_s(raw) if raw.strip() else None


def _positive_size(raw: str) -> int:
    size = parse_size_bytes(raw)
    if size <= 0:
        raise ValueError(f"{raw!r} must be a positive size, e.g. 1MiB")
    return size


def _host_list(raw: str) -> frozenset[str]:
    return frozenset(host.strip().lower() for host in raw.split(",") if host.strip())


# Bounded resources per request (frontend/limits.py): enforced before parsing and before auth.
FRONTEND_LIMIT_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "inference_max_body_bytes",
        "--inference-max-body",
        ("CORRAL_INFERENCE_MAX_BODY",),
        16 << 20,
        _positive_size,
        "largest request body on /v1/* (413 past it, unread); keep it under the 50 MiB "
        "gRPC message limit to the backends",
    ),
    Setting(
        "node_api_max_body_bytes",
        "--node-api-max-body",
        ("CORRAL_NODE_API_MAX_BODY",),
        1 << 20,
        _positive_size,
        "largest request body on the worker node API /api/node/* (413 past it, unread)",
    ),
    Setting(
        "model_config_max_body_bytes",
        "--model-config-max-body",
        ("CORRAL_MODEL_CONFIG_MAX_BODY",),
        1 << 20,
        _positive_size,
        "largest model config edit on /api/model-configs/* (413 past it, unread)",
    ),
    Setting(
        "admin_max_body_bytes",
        "--admin-max-body",
        ("CORRAL_ADMIN_MAX_BODY",),
        1 << 20,
        _positive_size,
        "largest request body on every other route: admin APIs, keys, settings (413 past it, unread)",
    ),
    Setting(
        "max_concurrent_requests",
        "--max-concurrent-requests",
        ("CORRAL_MAX_CONCURRENT_REQUESTS",),
        1024,
        parse_positive_int,
        "requests this frontend serves at once (streams until they end; health checks "
        "excluded); past it a request gets 429 with Retry-After instead of queueing",
    ),
    # issue 21: slow and hostile clients (httpguard.py): deadlines to receive a request, a connection cap
    Setting(
        "http_header_timeout_s",
        "--http-header-timeout",
        ("CORRAL_HTTP_HEADER_TIMEOUT",),
        10.0,
        parse_positive_duration_s,
        "a request's headers must arrive whole within this of its first byte (of "
        "the connection, for its first request); past it: 408 and the connection closes",
    ),
    Setting(
        "http_body_timeout_s",
        "--http-body-timeout",
        ("CORRAL_HTTP_BODY_TIMEOUT",),
        60.0,
        parse_positive_duration_s,
        "once its headers arrived, a request's body must arrive whole within this; "
        "past it: 408 and close (responses, streams included, are never cut by it)",
    ),
    Setting(
        "max_n",
        "--max-n",
        ("CORRAL_MAX_N",),
        8,
        parse_positive_int,
        "most choices one chat or completions request may ask for (`n`, each one generation); more is a 400 "
        "naming n",
    ),
    Setting(
        "max_connections",
        "--max-connections",
        ("CORRAL_MAX_CONNECTIONS",),
        4096,
        parse_positive_int,
        "open HTTP connections per frontend process; past it a new one gets 503 at once and is closed "
        "(lowered to what the process's open-file limit allows, with a warning)",
    ),
    # issue 22 item 4: images in chat requests (frontend/inference/images.py)
    Setting(
        "image_max_bytes",
        "--image-max-bytes",
        ("CORRAL_IMAGE_MAX_BYTES",),
        10 << 20,
        _positive_size,
        "largest image one chat request may carry (decoded, or fetched); past it a 400 naming the part",
    ),
    Setting(
        "image_max_count",
        "--image-max-count",
        ("CORRAL_IMAGE_MAX_COUNT",),
        8,
        parse_positive_int,
        "most images one chat request may carry; past it a 400 naming messages",
    ),
    Setting(
        "image_url_hosts",
        "--image-url-hosts",
        ("CORRAL_IMAGE_URL_HOSTS",),
        frozenset(),
        _host_list,
        "hosts ('name' or 'name:port', separated by ',') whose http(s) image URLs the frontend fetches; '*' "
        "allows any host with a public address; empty (the default): only data: URLs are taken",
    ),
    Setting(
        "image_fetch_timeout_s",
        "--image-fetch-timeout",
        ("CORRAL_IMAGE_FETCH_TIMEOUT",),
        10.0,
        parse_positive_duration_s,
        "how long the frontend may take to fetch one image URL; past it: 408",
    ),
    # issue 23: generated images answered by URL (frontend/inference/media.py)
    Setting(
        "generated_image_ttl_s",
        "--generated-image-ttl",
        ("CORRAL_GENERATED_IMAGE_TTL",),
        3600.0,
        parse_positive_duration_s,
        "how long an image of /v1/images/generations answered with response_format "
        "url stays at its URL (kept in PostgreSQL, served by every frontend; swept after)",
    ),
    Setting(
        "http_max_header_bytes",
        "--http-max-header-bytes",
        ("CORRAL_HTTP_MAX_HEADER_BYTES",),
        64 << 10,
        _positive_size,
        "largest request line plus headers of one request; past it: 431 and the connection "
        "closes (uvicorn's parser has no bound of its own)",
    ),
)


FRONTEND_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "address",
        "--address",
        ("LOCALAI_ADDRESS",),
        "0.0.0.0:8080",
        parse_host_port,
        "HTTP listen address of the API (host:port)",
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
        "database_url",
        "--database-url",
        ("LOCALAI_AUTH_DATABASE_URL", "DATABASE_URL"),
        None,
        parse_postgres_url,
        "PostgreSQL URL holding all shared state",
        required=True,
    ),
    Setting(
        "registration_token",
        "--registration-token",
        ("LOCALAI_REGISTRATION_TOKEN",),
        "",
        help="shared secret workers present on /api/node/*, file server and backend gRPC",
        secret=True,
    ),
    Setting(
        "auto_approve_nodes",
        "--auto-approve-nodes",
        ("LOCALAI_AUTO_APPROVE_NODES",),
        False,
        parse_bool,
        "new worker nodes are healthy at once instead of pending approval",
        is_switch=True,
    ),
    Setting(
        "models_path",
        "--models-path",
        ("LOCALAI_MODELS_PATH",),
        "./models",
        help="directory of model config YAMLs and model files",
    ),
    Setting(
        "model_path_roots",
        "--model-path-roots",
        ("CORRAL_MODEL_PATH_ROOTS",),
        (),
        parse_path_list,
        "more directories model configs may name files in (absolute, separated by ':' or ','); a config "
        "naming a file outside these and the models path is refused (400; skipped at start)",
    ),
    Setting(
        "backend_install_timeout_s",
        "--backend-install-timeout",
        ("LOCALAI_NATS_BACKEND_INSTALL_TIMEOUT",),
        15 * 60.0,
        parse_duration_s,
        "how long to wait for a worker to answer backend.install",
    ),
    Setting(
        "backend_upgrade_timeout_s",
        "--backend-upgrade-timeout",
        ("LOCALAI_NATS_BACKEND_UPGRADE_TIMEOUT",),
        15 * 60.0,
        parse_duration_s,
        "how long to wait for a worker to answer backend.upgrade",
    ),
    Setting(
        "backend_delete_timeout_s",
        "--backend-delete-timeout",
        ("CORRAL_BACKEND_DELETE_TIMEOUT",),
        120.0,
        parse_duration_s,
        "how long an admin backend delete waits for the worker (backend.delete)",
    ),
    Setting(
        "node_op_timeout_s",
        "--node-op-timeout",
        ("CORRAL_NODE_OP_TIMEOUT",),
        30.0,
        parse_duration_s,
        "how long admin node calls wait for the worker: backend list, model unload/delete, backend logs",
    ),
    Setting(
        "model_load_timeout_s",
        "--model-load-timeout",
        ("LOCALAI_NATS_MODEL_LOAD_TIMEOUT",),
        None,
        _optional_duration_s,
        "LoadModel deadline; unset = 5m + 20s per GiB of checkpoint, capped at 6h",
    ),
    Setting(
        "model_load_wait_s",
        "--model-load-wait",
        ("LOCALAI_MODEL_LOAD_WAIT",),
        60.0,
        parse_duration_s,
        "how long a request waits for its model to load (0 = no bound)",
    ),
    Setting(
        "load_stall_window_s",
        "--load-stall-window",
        ("CORRAL_LOAD_STALL_WINDOW",),
        300.0,
        parse_duration_s,
        "a staging load with no progress for this long is abandoned",
    ),
    Setting(
        "load_orphan_window_s",
        "--load-orphan-window",
        ("CORRAL_LOAD_ORPHAN_WINDOW",),
        60.0,
        parse_duration_s,
        "a load job whose frontend stopped heartbeating for this long is taken over",
    ),
    Setting(
        "disk_headroom_check",
        "--distributed-disk-headroom-check",
        ("LOCALAI_DISTRIBUTED_DISK_HEADROOM_CHECK",),
        None,
        parse_bool,
        "refuse to place a model on nodes whose models filesystem cannot hold it (false = warn only); "
        "also settable at runtime via POST /api/settings",
        is_switch=True,
    ),
    Setting(
        "expose_node_header",
        "--expose-node-header",
        ("LOCALAI_EXPOSE_NODE_HEADER",),
        False,
        parse_bool,
        "add X-LocalAI-Node: <node id> to inference responses",
        is_switch=True,
    ),
    Setting(
        "eviction_wait_s",
        "--eviction-wait",
        ("CORRAL_EVICTION_WAIT",),
        30.0,
        parse_duration_s,
        "when every replica is busy, how long a load waits for one to go idle before failing",
    ),
    # issue 10 item 6: no hang on the backend path (routing/backend_client.py, routing/calls.py)
    Setting(
        "backend_call_timeout_s",
        "--backend-call-timeout",
        ("CORRAL_BACKEND_CALL_TIMEOUT",),
        600.0,
        parse_duration_s,
        "deadline of one unary backend call (Predict, Embedding); past it: 504",
    ),
    Setting(
        "stream_first_token_timeout_s",
        "--stream-first-token-timeout",
        ("CORRAL_STREAM_FIRST_TOKEN_TIMEOUT",),
        300.0,
        parse_duration_s,
        "how long a stream may wait for its first token (prompt processing)",
    ),
    Setting(
        "stream_idle_timeout_s",
        "--stream-idle-timeout",
        ("CORRAL_STREAM_IDLE_TIMEOUT",),
        60.0,
        parse_duration_s,
        "a stream that sends nothing for this long after its first token ends with an error",
    ),
    Setting(
        "backend_probe_timeout_s",
        "--backend-probe-timeout",
        ("CORRAL_BACKEND_PROBE_TIMEOUT",),
        2.0,
        parse_duration_s,
        "after a backend timeout, the replica's Health probe deadline; fail it and the replica is dropped",
    ),
    Setting(
        "backend_keepalive_s",
        "--backend-keepalive",
        ("CORRAL_BACKEND_KEEPALIVE",),
        20.0,
        parse_duration_s,
        "keepalive ping interval on backend connections (gRPC and the fast lane) while calls are in flight",
    ),
    Setting(
        "backend_keepalive_timeout_s",
        "--backend-keepalive-timeout",
        ("CORRAL_BACKEND_KEEPALIVE_TIMEOUT",),
        60.0,
        parse_duration_s,
        "a backend connection that answers no keepalive ping and sends nothing for this "
        "long fails its calls and the replica is dropped (a busy backend on a loaded CPU answers late)",
    ),
    Setting("log_level", "--log-level", ("LOCALAI_LOG_LEVEL",), "info", help="debug, info, warning or error"),
    Setting(
        "http_workers",
        "--http-workers",
        ("CORRAL_HTTP_WORKERS",),
        1,
        parse_http_workers,
        "frontend processes serving one port (SO_REUSEPORT), each a full frontend; use up to one per core",
    ),
    SLOW_CALLBACK_SETTING,
)
FRONTEND_SETTINGS += FRONTEND_LIMIT_SETTINGS  # issue 10: body size and concurrency limits
FRONTEND_SETTINGS += FRONTEND_LIFECYCLE_SETTINGS  # issue 5: node lifecycle, health, security
FRONTEND_SETTINGS += FRONTEND_ADMISSION_SETTINGS  # issue 21: pending cap, registration and auth rates
FRONTEND_SETTINGS += FRONTEND_STAGING_SETTINGS  # issue 4: staging modes, S3, Hugging Face
FRONTEND_SETTINGS += FRONTEND_SCHEDULING_SETTINGS  # issue 6: scheduling rules, replica reconciler
FRONTEND_SETTINGS += FRONTEND_AGENT_SETTINGS  # issue 13: MCP servers run by agent workers
FRONTEND_SETTINGS += FRONTEND_RESPONSES_SETTINGS  # issue 22: stored responses of the Responses API
