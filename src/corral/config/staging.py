"""Settings of model staging (issue 4): shared-models mode, S3 object storage, Hugging Face artifacts.

Appended to the frontend's and the worker's tables. The S3 settings are read by both sides (the
frontend uploads to the bucket, workers fetch from it); the Hugging Face ones only by the frontend --
workers never receive HF_TOKEN.
"""

from __future__ import annotations

from corral.config.parse import (
    parse_bool,
    parse_http_url,
    parse_int,
    parse_optional_http_url,
    parse_positive_duration_s,
)
from corral.config.settings import Setting
from corral.config.sizes import parse_size_bytes

DEFAULT_HF_ENDPOINT = "https://huggingface.co"


def _connection_count(raw: str) -> int:
    value = parse_int(raw)
    if not 1 <= value <= 65535:
        raise ValueError(f"{value} is out of range; use 1 to 65535 connections")
    return value


STORAGE_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "storage_url",
        "--storage-url",
        ("LOCALAI_STORAGE_URL",),
        "",
        parse_optional_http_url,
        "S3-compatible endpoint; set = stage model files through the bucket instead of HTTP to workers",
    ),
    Setting(
        "storage_bucket",
        "--storage-bucket",
        ("LOCALAI_STORAGE_BUCKET",),
        "localai",
        help="S3 bucket for staged files",
    ),
    Setting("storage_region", "--storage-region", ("LOCALAI_STORAGE_REGION",), "us-east-1", help="S3 region"),
    Setting(
        "storage_access_key",
        "--storage-access-key",
        ("LOCALAI_STORAGE_ACCESS_KEY",),
        "",
        help="S3 access key (set together with the secret key)",
        secret=True,
    ),
    Setting(
        "storage_secret_key",
        "--storage-secret-key",
        ("LOCALAI_STORAGE_SECRET_KEY",),
        "",
        help="S3 secret key (set together with the access key)",
        secret=True,
    ),
)

FRONTEND_STAGING_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "distributed_shared_models",
        "--distributed-shared-models",
        ("LOCALAI_DISTRIBUTED_SHARED_MODELS",),
        False,
        parse_bool,
        "every node mounts the models dir at the same path: skip staging, pass absolute paths",
        is_switch=True,
    ),
    Setting(
        "prehash_models",
        "--prehash-models",
        ("CORRAL_PREHASH_MODELS",),
        True,
        parse_bool,
        "hash configured model files without a recorded hash at start and on config edits (one thread, "
        "nice +10), so a model's first staging does not hash while it transfers",
    ),
    *STORAGE_SETTINGS,
    Setting(
        "hf_endpoint",
        "--hf-endpoint",
        ("HF_ENDPOINT",),
        DEFAULT_HF_ENDPOINT,
        parse_http_url,
        "Hugging Face hub the frontend downloads managed artifacts from",
    ),
    Setting(
        "hf_token",
        "--hf-token",
        ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"),
        "",
        help="Hugging Face token for gated/private repos; used by the frontend only",
        secret=True,
    ),
)

WORKER_STAGING_SETTINGS: tuple[Setting, ...] = (
    *STORAGE_SETTINGS,
    Setting(
        "staging_min_free_bytes",
        "--staging-min-free",
        ("CORRAL_STAGING_MIN_FREE_BYTES",),
        64 << 20,
        parse_size_bytes,
        "free space kept on the models filesystem; uploads that would eat it get 507",
    ),
    Setting(
        "ephemeral_staging_byte_limit",
        "--ephemeral-staging-byte-limit",
        ("LOCALAI_EPHEMERAL_STAGING_BYTE_LIMIT",),
        0,
        parse_size_bytes,
        "bytes of request inputs (audio, images, ...) held at once below the ephemeral/ roots; an input "
        "past it gets 507 before any byte is written; 0 = 10% of the staging filesystem, at least 256 MiB",
    ),
    Setting(
        "ephemeral_staging_min_free_bytes",
        "--ephemeral-staging-min-free-bytes",
        ("LOCALAI_EPHEMERAL_STAGING_MIN_FREE_BYTES",),
        0,
        parse_size_bytes,
        "free space a request input must leave on the staging filesystem (507 otherwise); "
        "0 = 5% of that filesystem, between 1 GiB and 10 GiB",
    ),
    Setting(
        "max_upload_bytes",
        "--max-upload-size",
        ("CORRAL_MAX_UPLOAD_BYTES",),
        50 << 30,
        parse_size_bytes,
        "largest single file the file server accepts (413 above it)",
    ),
    Setting(
        "file_server_max_connections",
        "--file-server-max-connections",
        ("CORRAL_FILE_SERVER_MAX_CONNECTIONS",),
        64,
        _connection_count,
        "connections the file server serves at once; more are answered 503 and closed",
    ),
    Setting(
        "file_server_header_timeout_s",
        "--file-server-header-timeout",
        ("CORRAL_FILE_SERVER_HEADER_TIMEOUT",),
        30.0,
        parse_positive_duration_s,
        "a request header must arrive whole within this (also ends idle keep-alive connections)",
    ),
    Setting(
        "file_server_idle_timeout_s",
        "--file-server-idle-timeout",
        ("CORRAL_FILE_SERVER_IDLE_TIMEOUT",),
        300.0,
        parse_positive_duration_s,
        "an upload body that sends nothing for this long is cut (bytes received are kept)",
    ),
)
