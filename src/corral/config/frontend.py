"""Settings of `corral run` (the frontend). Names follow the specification's flags and env vars."""

from __future__ import annotations

from pathlib import Path

from corral.config.admission import FrontendAdmissionSettings
from corral.config.agents import FrontendAgentSettings
from corral.config.autoscale import FrontendAutoscaleSettings
from corral.config.batches import FrontendBatchSettings
from corral.config.breakers import FrontendBreakerSettings
from corral.config.model_gallery import FrontendModelGallerySettings
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
from corral.config.process import ProcessSettings, parse_http_workers
from corral.config.responses import FrontendResponsesSettings
from corral.config.scheduling import FrontendSchedulingSettings
from corral.config.security import FrontendLifecycleSettings
from corral.config.settings import setting, settings_class
from corral.config.sizes import parse_size_bytes
from corral.config.staging import FrontendStagingSettings
from corral.config.tenancy import FrontendTenancySettings
from corral.config.traffic import FrontendQueueSettings
from corral.config.traffic_series import FrontendTrafficSettings
from corral.config.usage import FrontendUsageSettings


def _optional_duration_s(raw: str) -> float | None:
    return parse_duration_s(raw) if raw.strip() else None


def _positive_size(raw: str) -> int:
    size = parse_size_bytes(raw)
    if size <= 0:
        raise ValueError(f"{raw!r} must be a positive size, e.g. 1MiB")
    return size


def _host_list(raw: str) -> frozenset[str]:
    return frozenset(host.strip().lower() for host in raw.split(",") if host.strip())


@settings_class
class FrontendLimitSettings:
    """Bounded resources per request (frontend/limits.py): enforced before parsing and before auth."""

    inference_max_body_bytes: int = setting(
        "--inference-max-body",
        "CORRAL_INFERENCE_MAX_BODY",
        default=16 << 20,
        parse=_positive_size,
        help="largest request body on /v1/* (413 past it, unread); keep it under the 50 MiB "
        "gRPC message limit to the backends",
    )
    node_api_max_body_bytes: int = setting(
        "--node-api-max-body",
        "CORRAL_NODE_API_MAX_BODY",
        default=1 << 20,
        parse=_positive_size,
        help="largest request body on the worker node API /api/node/* (413 past it, unread)",
    )
    model_config_max_body_bytes: int = setting(
        "--model-config-max-body",
        "CORRAL_MODEL_CONFIG_MAX_BODY",
        default=1 << 20,
        parse=_positive_size,
        help="largest model config edit on /api/model-configs/* (413 past it, unread)",
    )
    admin_max_body_bytes: int = setting(
        "--admin-max-body",
        "CORRAL_ADMIN_MAX_BODY",
        default=1 << 20,
        parse=_positive_size,
        help="largest request body on every other route: admin APIs, keys, settings (413 past it, unread)",
    )
    max_concurrent_requests: int = setting(
        "--max-concurrent-requests",
        "CORRAL_MAX_CONCURRENT_REQUESTS",
        default=1024,
        parse=parse_positive_int,
        help="requests this frontend serves at once (streams until they end; health checks "
        "excluded); past it a request gets 429 with Retry-After instead of queueing",
    )
    # issue 21: slow and hostile clients (httpguard.py): deadlines to receive a request, a connection cap
    http_header_timeout_s: float = setting(
        "--http-header-timeout",
        "CORRAL_HTTP_HEADER_TIMEOUT",
        default=10.0,
        parse=parse_positive_duration_s,
        help="a request's headers must arrive whole within this of its first byte (of "
        "the connection, for its first request); past it: 408 and the connection closes",
    )
    http_body_timeout_s: float = setting(
        "--http-body-timeout",
        "CORRAL_HTTP_BODY_TIMEOUT",
        default=60.0,
        parse=parse_positive_duration_s,
        help="once its headers arrived, a request's body must arrive whole within this; "
        "past it: 408 and close (responses, streams included, are never cut by it)",
    )
    max_n: int = setting(
        "--max-n",
        "CORRAL_MAX_N",
        default=8,
        parse=parse_positive_int,
        help="most choices one chat or completions request may ask for (`n`, each one generation); more is a 400 "
        "naming n",
    )
    max_connections: int = setting(
        "--max-connections",
        "CORRAL_MAX_CONNECTIONS",
        default=4096,
        parse=parse_positive_int,
        help="open HTTP connections per frontend process; past it a new one gets 503 at once and is closed "
        "(lowered to what the process's open-file limit allows, with a warning)",
    )
    # issue 22 item 4: images in chat requests (frontend/inference/images.py)
    image_max_bytes: int = setting(
        "--image-max-bytes",
        "CORRAL_IMAGE_MAX_BYTES",
        default=10 << 20,
        parse=_positive_size,
        help="largest image one chat request may carry (decoded, or fetched); past it a 400 naming the part",
    )
    image_max_count: int = setting(
        "--image-max-count",
        "CORRAL_IMAGE_MAX_COUNT",
        default=8,
        parse=parse_positive_int,
        help="most images one chat request may carry; past it a 400 naming messages",
    )
    image_url_hosts: frozenset[str] = setting(
        "--image-url-hosts",
        "CORRAL_IMAGE_URL_HOSTS",
        default=frozenset(),
        parse=_host_list,
        help="hosts ('name' or 'name:port', separated by ',') whose http(s) image URLs the frontend fetches; '*' "
        "allows any host with a public address; empty (the default): only data: URLs are taken",
    )
    image_fetch_timeout_s: float = setting(
        "--image-fetch-timeout",
        "CORRAL_IMAGE_FETCH_TIMEOUT",
        default=10.0,
        parse=parse_positive_duration_s,
        help="how long the frontend may take to fetch one image URL; past it: 408",
    )
    # issue 23: generated images answered by URL (frontend/inference/media.py)
    generated_image_ttl_s: float = setting(
        "--generated-image-ttl",
        "CORRAL_GENERATED_IMAGE_TTL",
        default=3600.0,
        parse=parse_positive_duration_s,
        help="how long an image of /v1/images/generations answered with response_format "
        "url stays at its URL (kept in PostgreSQL, served by every frontend; swept after)",
    )
    http_max_header_bytes: int = setting(
        "--http-max-header-bytes",
        "CORRAL_HTTP_MAX_HEADER_BYTES",
        default=64 << 10,
        parse=_positive_size,
        help="largest request line plus headers of one request; past it: 431 and the connection "
        "closes (uvicorn's parser has no bound of its own)",
    )


@settings_class
class FrontendSettings(
    ProcessSettings,
    FrontendLimitSettings,  # issue 10: body size and concurrency limits
    FrontendLifecycleSettings,  # issue 5: node lifecycle, health, security
    FrontendAdmissionSettings,  # issue 21: pending cap, registration and auth rates
    FrontendStagingSettings,  # issue 4: staging modes, S3, Hugging Face
    FrontendSchedulingSettings,  # issue 6: scheduling rules, replica reconciler
    FrontendAgentSettings,  # issue 13: MCP servers run by agent workers
    FrontendResponsesSettings,  # issue 22: stored responses of the Responses API
    FrontendQueueSettings,  # issue 25: the router queue
    FrontendTenancySettings,  # issue 25: API keys' policy
    FrontendUsageSettings,  # issue 25: usage accounting
    FrontendBreakerSettings,  # issue 25: circuit breakers and retries
    FrontendAutoscaleSettings,  # issue 25: autoscaling on load
    FrontendBatchSettings,  # issue 25: Files and Batch APIs
    FrontendTrafficSettings,  # issue 26: the traffic series
    FrontendModelGallerySettings,  # issue 26: the model gallery
):
    """`corral run`."""

    address: tuple[str, int] = setting(
        "--address",
        "LOCALAI_ADDRESS",
        default=("0.0.0.0", 8080),
        parse=parse_host_port,
        help="HTTP listen address of the API (host:port)",
    )
    nats_url: str = setting(
        "--nats-url",
        "LOCALAI_NATS_URL",
        parse=parse_nats_url,
        help="NATS server URL (nats:// or tls://)",
        required=True,
    )
    database_url: str = setting(
        "--database-url",
        ("LOCALAI_AUTH_DATABASE_URL", "DATABASE_URL"),
        parse=parse_postgres_url,
        help="PostgreSQL URL holding all shared state",
        required=True,
    )
    registration_token: str = setting(
        "--registration-token",
        "LOCALAI_REGISTRATION_TOKEN",
        default="",
        help="shared secret workers present on /api/node/*, file server and backend gRPC",
        secret=True,
    )
    auto_approve_nodes: bool = setting(
        "--auto-approve-nodes",
        "LOCALAI_AUTO_APPROVE_NODES",
        default=False,
        parse=parse_bool,
        help="new worker nodes are healthy at once instead of pending approval",
        is_switch=True,
    )
    models_path: str = setting(
        "--models-path",
        "LOCALAI_MODELS_PATH",
        default="./models",
        help="directory of model config YAMLs and model files",
    )
    model_path_roots: tuple[Path, ...] = setting(
        "--model-path-roots",
        "CORRAL_MODEL_PATH_ROOTS",
        default=(),
        parse=parse_path_list,
        help="more directories model configs may name files in (absolute, separated by ':' or ','); a config "
        "naming a file outside these and the models path is refused (400; skipped at start)",
    )
    backend_install_timeout_s: float = setting(
        "--backend-install-timeout",
        "LOCALAI_NATS_BACKEND_INSTALL_TIMEOUT",
        default=15 * 60.0,
        parse=parse_duration_s,
        help="how long to wait for a worker to answer backend.install",
    )
    backend_upgrade_timeout_s: float = setting(
        "--backend-upgrade-timeout",
        "LOCALAI_NATS_BACKEND_UPGRADE_TIMEOUT",
        default=15 * 60.0,
        parse=parse_duration_s,
        help="how long to wait for a worker to answer backend.upgrade",
    )
    backend_delete_timeout_s: float = setting(
        "--backend-delete-timeout",
        "CORRAL_BACKEND_DELETE_TIMEOUT",
        default=120.0,
        parse=parse_duration_s,
        help="how long an admin backend delete waits for the worker (backend.delete)",
    )
    node_op_timeout_s: float = setting(
        "--node-op-timeout",
        "CORRAL_NODE_OP_TIMEOUT",
        default=30.0,
        parse=parse_duration_s,
        help="how long admin node calls wait for the worker: backend list, model unload/delete, backend logs",
    )
    model_load_timeout_s: float | None = setting(
        "--model-load-timeout",
        "LOCALAI_NATS_MODEL_LOAD_TIMEOUT",
        default=None,
        parse=_optional_duration_s,
        help="LoadModel deadline; unset = 5m + 20s per GiB of checkpoint, capped at 6h",
    )
    model_load_wait_s: float = setting(
        "--model-load-wait",
        "LOCALAI_MODEL_LOAD_WAIT",
        default=60.0,
        parse=parse_duration_s,
        help="how long a request waits for its model to load (0 = no bound)",
    )
    load_stall_window_s: float = setting(
        "--load-stall-window",
        "CORRAL_LOAD_STALL_WINDOW",
        default=300.0,
        parse=parse_duration_s,
        help="a staging load with no progress for this long is abandoned",
    )
    load_orphan_window_s: float = setting(
        "--load-orphan-window",
        "CORRAL_LOAD_ORPHAN_WINDOW",
        default=60.0,
        parse=parse_duration_s,
        help="a load job whose frontend stopped heartbeating for this long is taken over",
    )
    disk_headroom_check: bool | None = setting(
        "--distributed-disk-headroom-check",
        "LOCALAI_DISTRIBUTED_DISK_HEADROOM_CHECK",
        default=None,
        parse=parse_bool,
        help="refuse to place a model on nodes whose models filesystem cannot hold it (false = warn only); "
        "also settable at runtime via POST /api/settings",
        is_switch=True,
    )
    expose_node_header: bool = setting(
        "--expose-node-header",
        "LOCALAI_EXPOSE_NODE_HEADER",
        default=False,
        parse=parse_bool,
        help="add X-LocalAI-Node: <node id> to inference responses",
        is_switch=True,
    )
    eviction_wait_s: float = setting(
        "--eviction-wait",
        "CORRAL_EVICTION_WAIT",
        default=30.0,
        parse=parse_duration_s,
        help="when every replica is busy, how long a load waits for one to go idle before failing",
    )
    # issue 10 item 6: no hang on the backend path (routing/backend_client.py, routing/calls.py)
    backend_call_timeout_s: float = setting(
        "--backend-call-timeout",
        "CORRAL_BACKEND_CALL_TIMEOUT",
        default=600.0,
        parse=parse_duration_s,
        help="deadline of one unary backend call (Predict, Embedding); past it: 504",
    )
    stream_first_token_timeout_s: float = setting(
        "--stream-first-token-timeout",
        "CORRAL_STREAM_FIRST_TOKEN_TIMEOUT",
        default=300.0,
        parse=parse_duration_s,
        help="how long a stream may wait for its first token (prompt processing)",
    )
    stream_idle_timeout_s: float = setting(
        "--stream-idle-timeout",
        "CORRAL_STREAM_IDLE_TIMEOUT",
        default=60.0,
        parse=parse_duration_s,
        help="a stream that sends nothing for this long after its first token ends with an error",
    )
    backend_probe_timeout_s: float = setting(
        "--backend-probe-timeout",
        "CORRAL_BACKEND_PROBE_TIMEOUT",
        default=2.0,
        parse=parse_duration_s,
        help="after a backend timeout, the replica's Health probe deadline; fail it and the replica is dropped",
    )
    backend_keepalive_s: float = setting(
        "--backend-keepalive",
        "CORRAL_BACKEND_KEEPALIVE",
        default=20.0,
        parse=parse_duration_s,
        help="keepalive ping interval on backend connections (gRPC and the fast lane) while calls are in flight",
    )
    backend_keepalive_timeout_s: float = setting(
        "--backend-keepalive-timeout",
        "CORRAL_BACKEND_KEEPALIVE_TIMEOUT",
        default=60.0,
        parse=parse_duration_s,
        help="a backend connection that answers no keepalive ping and sends nothing for this "
        "long fails its calls and the replica is dropped (a busy backend on a loaded CPU answers late)",
    )
    log_level: str = setting(
        "--log-level", "LOCALAI_LOG_LEVEL", default="info", help="debug, info, warning or error"
    )
    http_workers: int = setting(
        "--http-workers",
        "CORRAL_HTTP_WORKERS",
        default=1,
        parse=parse_http_workers,
        help="frontend processes serving one port (SO_REUSEPORT), each a full frontend; use up to one per core",
    )
