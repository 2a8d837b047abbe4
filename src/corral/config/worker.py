"""Settings of `corral worker`. Names follow the specification's flags and env vars."""

from __future__ import annotations

import re

from corral.config.parse import (
    parse_bool,
    parse_duration_s,
    parse_http_url,
    parse_int,
    parse_labels,
    parse_nats_url,
    parse_non_negative_int,
)
from corral.config.process import ProcessSettings
from corral.config.security import WorkerLifecycleSettings
from corral.config.settings import setting, settings_class
from corral.config.staging import WorkerStagingSettings
from corral.models.names import backend_name_problem

PRESTART_MAX_BACKENDS = 8
LOAD_DEFAULT_MAX = (1 << 31) - 1  # ModelOptions fields are int32
CAPABILITY = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")  # the registry keeps 64 characters


def parse_load_default(raw: str) -> int:
    """A load default: a whole number 0..2147483647 (0: none)."""
    value = parse_non_negative_int(raw)
    if value > LOAD_DEFAULT_MAX:
        raise ValueError(f"at most {LOAD_DEFAULT_MAX}, got {value}")
    return value


def parse_capability(raw: str) -> str:
    """A backend capability name (`nvidia-cuda-12`, `metal`, `default`); empty: detect it."""
    if raw and not CAPABILITY.fullmatch(raw):
        raise ValueError(
            f"must be lowercase letters, digits, '.', '_' or '-', at most 64 characters, got {raw[:80]!r}"
        )
    return raw


def parse_backend_names(raw: str) -> tuple[str, ...]:
    """A comma-separated list of backend names (`llama-cpp,whisper`); empty for none."""
    names = tuple(dict.fromkeys(item.strip() for item in raw.split(",") if item.strip()))
    for name in names:
        if (problem := backend_name_problem(name)) is not None:
            raise ValueError(f"backend name {problem}")
    if len(names) > PRESTART_MAX_BACKENDS:
        raise ValueError(f"at most {PRESTART_MAX_BACKENDS} backends, got {len(names)}")
    return names


@settings_class
class WorkerSettings(
    ProcessSettings,
    WorkerLifecycleSettings,  # issue 5: node lifecycle, health, security
    WorkerStagingSettings,  # issue 4: staging modes, S3, Hugging Face
):
    """`corral worker`."""

    register_to: str = setting(
        "--register-to",
        "LOCALAI_REGISTER_TO",
        parse=parse_http_url,
        help="frontend base URL to register with (http://frontend:8080)",
        required=True,
    )
    registration_token: str = setting(
        "--registration-token",
        "LOCALAI_REGISTRATION_TOKEN",
        default="",
        help="shared secret from the frontend's --registration-token",
        secret=True,
    )
    nats_url: str = setting(
        "--nats-url",
        "LOCALAI_NATS_URL",
        parse=parse_nats_url,
        help="NATS server URL (nats:// or tls://)",
        required=True,
    )
    node_name: str = setting(
        "--node-name",
        "LOCALAI_NODE_NAME",
        default="",
        help="node identity in the registry (default: hostname)",
    )
    addr: str = setting(
        "--addr",
        "LOCALAI_ADDR",
        default="",
        help="reachable host:port of this worker; its port is the gRPC base port",
    )
    serve_addr: str = setting(
        "--serve-addr",
        "LOCALAI_SERVE_ADDR",
        default="0.0.0.0:50051",
        help="base gRPC bind address when --addr is not set",
    )
    grpc_max_port: int = setting(
        "--grpc-max-port",
        "LOCALAI_GRPC_MAX_PORT",
        default=0,
        parse=parse_int,
        help="top of the backend gRPC port range (0 = 65535)",
    )
    http_addr: str = setting(
        "--http-addr",
        "LOCALAI_HTTP_ADDR",
        default="",
        help="file server bind address (default 0.0.0.0:<base port - 1>)",
    )
    advertise_addr: str = setting(
        "--advertise-addr",
        "LOCALAI_ADVERTISE_ADDR",
        default="",
        help="gRPC host:port other nodes dial (default --addr or <hostname>:<base port>)",
    )
    advertise_http_addr: str = setting(
        "--advertise-http-addr",
        "LOCALAI_ADVERTISE_HTTP_ADDR",
        default="",
        help="file server host:port other nodes dial (default <advertise host>:<base port - 1>)",
    )
    heartbeat_interval_s: float = setting(
        "--heartbeat-interval",
        "LOCALAI_HEARTBEAT_INTERVAL",
        default=10.0,
        parse=parse_duration_s,
        help="interval between heartbeats to the frontend",
    )
    models_path: str = setting(
        "--models-path", "LOCALAI_MODELS_PATH", default="./models", help="where staged model files are kept"
    )
    node_labels: dict[str, str] = setting(
        "--node-labels",
        "LOCALAI_NODE_LABELS",
        default={},
        parse=parse_labels,
        help="scheduling labels k=v,k2=v2",
    )
    max_replicas_per_model: int = setting(
        "--max-replicas-per-model",
        "LOCALAI_MAX_REPLICAS_PER_MODEL",
        default=1,
        parse=parse_int,
        help="replicas of one model this node may run",
    )
    allow_unauthenticated: bool = setting(
        "--allow-unauthenticated",
        "LOCALAI_WORKER_ALLOW_UNAUTHENTICATED",
        default=False,
        parse=parse_bool,
        help="serve files without a registration token (unsafe; off by default)",
        is_switch=True,
    )
    backend_start_timeout_s: float = setting(
        "--backend-start-timeout",
        "LOCALAI_BACKEND_START_TIMEOUT",
        default=30.0,
        parse=parse_duration_s,
        help="how long a new backend process may take to answer gRPC Health",
    )
    backend_stall_window_s: float = setting(
        "--backend-stall-window",
        "CORRAL_BACKEND_STALL_WINDOW",
        default=10.0,
        parse=parse_duration_s,
        help="a running backend a load would reuse is replaced only when it answered no Health "
        "and made no progress (replies, CPU time) for this long; one that computes is kept",
    )
    backend_prestart: tuple[str, ...] = setting(
        "--backend-prestart",
        "CORRAL_BACKEND_PRESTART",
        default=("llama-cpp",),
        parse=parse_backend_names,
        help="backends kept as one started spare process each, so a cold load does not pay "
        "the process start while its files stage (comma-separated names; empty: none)",
    )
    backends_path: str = setting(
        "--backends-path",
        "LOCALAI_BACKENDS_PATH",
        default="./backends",
        help="where backends are installed from galleries (one directory each: run.sh + metadata.json)",
    )
    backends_system_path: str = setting(
        "--backends-system-path",
        "LOCALAI_BACKENDS_SYSTEM_PATH",
        default="/var/lib/local-ai/backends",
        help="read-only backends shipped with the system, searched after "
        "--backends-path (corral's built-in llama-cpp and simulator are searched last)",
    )
    backend_galleries: str = setting(
        "--backend-galleries",
        ("LOCALAI_BACKEND_GALLERIES", "LOCALAI_GALLERIES"),
        default="",
        help='backend galleries: JSON [{"name":..,"url":<path or http(s) URL of an index>}] or one '
        "path/URL (default: corral's own gallery; [] for none)",
    )
    require_backend_integrity: bool = setting(
        "--require-backend-integrity",
        "LOCALAI_REQUIRE_BACKEND_INTEGRITY",
        default=False,
        parse=parse_bool,
        help="refuse gallery backends without a sha256 digest",
        is_switch=True,
    )
    backend_gallery_timeout_s: float = setting(
        "--backend-gallery-timeout",
        "LOCALAI_BACKEND_GALLERY_TIMEOUT",
        default=60.0,
        parse=parse_duration_s,
        help="how long one read from a gallery (index, archive, pip download) may stall",
    )
    vram_budget: str = setting(
        "--vram-budget",
        "LOCALAI_VRAM_BUDGET",
        default="",
        help="cap the VRAM this node offers for placement: 80%, 12GB, 12GiB, raw bytes (admin override wins)",
    )
    threads: int = setting(
        "--threads",
        "LOCALAI_THREADS",
        default=0,
        parse=parse_load_default,
        help="threads of a backend on this node whose model sets none (0: the backend decides; llama.cpp: all CPUs)",
    )
    context_size: int = setting(
        "--context-size",
        "LOCALAI_CONTEXT_SIZE",
        default=0,
        parse=parse_load_default,
        help="context size (tokens) of a model on this node whose config sets none (0: the model's own)",
    )
    capability: str = setting(
        "--capability",
        "LOCALAI_FORCE_META_BACKEND_CAPABILITY",
        default="",
        parse=parse_capability,
        help="backend capability this node reports instead of the detected one (nvidia-cuda-12, metal, "
        "default; detected: nvidia-cuda-<major> from nvidia-smi, default without a GPU)",
    )
    log_level: str = setting(
        "--log-level", "LOCALAI_LOG_LEVEL", default="info", help="debug, info, warning or error"
    )
