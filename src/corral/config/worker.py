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
from corral.config.process import SLOW_CALLBACK_SETTING
from corral.config.security import WORKER_LIFECYCLE_SETTINGS
from corral.config.settings import Setting
from corral.config.staging import WORKER_STAGING_SETTINGS
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


WORKER_SETTINGS: tuple[Setting, ...] = (
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
        "registration_token",
        "--registration-token",
        ("LOCALAI_REGISTRATION_TOKEN",),
        "",
        help="shared secret from the frontend's --registration-token",
        secret=True,
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
        "node_name",
        "--node-name",
        ("LOCALAI_NODE_NAME",),
        "",
        help="node identity in the registry (default: hostname)",
    ),
    Setting(
        "addr",
        "--addr",
        ("LOCALAI_ADDR",),
        "",
        help="reachable host:port of this worker; its port is the gRPC base port",
    ),
    Setting(
        "serve_addr",
        "--serve-addr",
        ("LOCALAI_SERVE_ADDR",),
        "0.0.0.0:50051",
        help="base gRPC bind address when --addr is not set",
    ),
    Setting(
        "grpc_max_port",
        "--grpc-max-port",
        ("LOCALAI_GRPC_MAX_PORT",),
        0,
        parse_int,
        "top of the backend gRPC port range (0 = 65535)",
    ),
    Setting(
        "http_addr",
        "--http-addr",
        ("LOCALAI_HTTP_ADDR",),
        "",
        help="file server bind address (default 0.0.0.0:<base port - 1>)",
    ),
    Setting(
        "advertise_addr",
        "--advertise-addr",
        ("LOCALAI_ADVERTISE_ADDR",),
        "",
        help="gRPC host:port other nodes dial (default --addr or <hostname>:<base port>)",
    ),
    Setting(
        "advertise_http_addr",
        "--advertise-http-addr",
        ("LOCALAI_ADVERTISE_HTTP_ADDR",),
        "",
        help="file server host:port other nodes dial (default <advertise host>:<base port - 1>)",
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
        "models_path",
        "--models-path",
        ("LOCALAI_MODELS_PATH",),
        "./models",
        help="where staged model files are kept",
    ),
    Setting(
        "node_labels",
        "--node-labels",
        ("LOCALAI_NODE_LABELS",),
        {},
        parse_labels,
        "scheduling labels k=v,k2=v2",
    ),
    Setting(
        "max_replicas_per_model",
        "--max-replicas-per-model",
        ("LOCALAI_MAX_REPLICAS_PER_MODEL",),
        1,
        parse_int,
        "replicas of one model this node may run",
    ),
    Setting(
        "allow_unauthenticated",
        "--allow-unauthenticated",
        ("LOCALAI_WORKER_ALLOW_UNAUTHENTICATED",),
        False,
        parse_bool,
        "serve files without a registration token (unsafe; off by default)",
        is_switch=True,
    ),
    Setting(
        "backend_start_timeout_s",
        "--backend-start-timeout",
        ("LOCALAI_BACKEND_START_TIMEOUT",),
        30.0,
        parse_duration_s,
        "how long a new backend process may take to answer gRPC Health",
    ),
    Setting(
        "backend_stall_window_s",
        "--backend-stall-window",
        ("CORRAL_BACKEND_STALL_WINDOW",),
        10.0,
        parse_duration_s,
        "a running backend a load would reuse is replaced only when it answered no Health "
        "and made no progress (replies, CPU time) for this long; one that computes is kept",
    ),
    Setting(
        "backend_prestart",
        "--backend-prestart",
        ("CORRAL_BACKEND_PRESTART",),
        ("llama-cpp",),
        parse_backend_names,
        "backends kept as one started spare process each, so a cold load does not pay "
        "the process start while its files stage (comma-separated names; empty: none)",
    ),
    Setting(
        "backends_path",
        "--backends-path",
        ("LOCALAI_BACKENDS_PATH",),
        "./backends",
        help="where backends are installed from galleries (one directory each: run.sh + metadata.json)",
    ),
    Setting(
        "backends_system_path",
        "--backends-system-path",
        ("LOCALAI_BACKENDS_SYSTEM_PATH",),
        "/var/lib/local-ai/backends",
        help="read-only backends shipped with the system, searched after "
        "--backends-path (corral's built-in llama-cpp and simulator are searched last)",
    ),
    Setting(
        "backend_galleries",
        "--backend-galleries",
        ("LOCALAI_BACKEND_GALLERIES", "LOCALAI_GALLERIES"),
        "",
        help='backend galleries: JSON [{"name":..,"url":<path or http(s) URL of an index>}] or one '
        "path/URL (default: corral's own gallery; [] for none)",
    ),
    Setting(
        "require_backend_integrity",
        "--require-backend-integrity",
        ("LOCALAI_REQUIRE_BACKEND_INTEGRITY",),
        False,
        parse_bool,
        "refuse gallery backends without a sha256 digest",
        is_switch=True,
    ),
    Setting(
        "backend_gallery_timeout_s",
        "--backend-gallery-timeout",
        ("LOCALAI_BACKEND_GALLERY_TIMEOUT",),
        60.0,
        parse_duration_s,
        "how long one read from a gallery (index, archive, pip download) may stall",
    ),
    Setting(
        "vram_budget",
        "--vram-budget",
        ("LOCALAI_VRAM_BUDGET",),
        "",
        help="cap the VRAM this node offers for placement: 80%, 12GB, 12GiB, raw bytes (admin override wins)",
    ),
    Setting(
        "threads",
        "--threads",
        ("LOCALAI_THREADS",),
        0,
        parse_load_default,
        "threads of a backend on this node whose model sets none (0: the backend decides; llama.cpp: all CPUs)",
    ),
    Setting(
        "context_size",
        "--context-size",
        ("LOCALAI_CONTEXT_SIZE",),
        0,
        parse_load_default,
        "context size (tokens) of a model on this node whose config sets none (0: the model's own)",
    ),
    Setting(
        "capability",
        "--capability",
        ("LOCALAI_FORCE_META_BACKEND_CAPABILITY",),
        "",
        parse_capability,
        help="backend capability this node reports instead of the detected one (nvidia-cuda-12, metal, "
        "default; detected: nvidia-cuda-<major> from nvidia-smi, default without a GPU)",
    ),
    Setting("log_level", "--log-level", ("LOCALAI_LOG_LEVEL",), "info", help="debug, info, warning or error"),
    SLOW_CALLBACK_SETTING,
)
WORKER_SETTINGS += WORKER_LIFECYCLE_SETTINGS  # issue 5: node lifecycle, health, security
WORKER_SETTINGS += WORKER_STAGING_SETTINGS  # issue 4: staging modes, S3, Hugging Face
