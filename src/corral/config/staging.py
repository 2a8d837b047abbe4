"""Settings of model staging (issue 4): shared-models mode, S3 object storage, Hugging Face artifacts.

Mixed into the frontend's and the worker's settings. The S3 settings are read by both sides (the
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
from corral.config.settings import setting, settings_class
from corral.config.sizes import parse_size_bytes

DEFAULT_HF_ENDPOINT = "https://huggingface.co"


def _connection_count(raw: str) -> int:
    value = parse_int(raw)
    if not 1 <= value <= 65535:
        raise ValueError(f"{value} is out of range; use 1 to 65535 connections")
    return value


@settings_class
class StorageSettings:
    """S3 object storage (read by the frontend and the workers)."""

    storage_url: str = setting(
        "--storage-url",
        "LOCALAI_STORAGE_URL",
        default="",
        parse=parse_optional_http_url,
        help="S3-compatible endpoint; set = stage model files through the bucket instead of HTTP to workers",
    )
    storage_bucket: str = setting(
        "--storage-bucket", "LOCALAI_STORAGE_BUCKET", default="localai", help="S3 bucket for staged files"
    )
    storage_region: str = setting(
        "--storage-region", "LOCALAI_STORAGE_REGION", default="us-east-1", help="S3 region"
    )
    storage_access_key: str = setting(
        "--storage-access-key",
        "LOCALAI_STORAGE_ACCESS_KEY",
        default="",
        help="S3 access key (set together with the secret key)",
        secret=True,
    )
    storage_secret_key: str = setting(
        "--storage-secret-key",
        "LOCALAI_STORAGE_SECRET_KEY",
        default="",
        help="S3 secret key (set together with the access key)",
        secret=True,
    )


@settings_class
class HuggingFaceSettings:
    """The Hugging Face hub (the frontend only: workers never receive HF_TOKEN)."""

    hf_endpoint: str = setting(
        "--hf-endpoint",
        "HF_ENDPOINT",
        default=DEFAULT_HF_ENDPOINT,
        parse=parse_http_url,
        help="Hugging Face hub the frontend downloads managed artifacts from",
    )
    hf_token: str = setting(
        "--hf-token",
        ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"),
        default="",
        help="Hugging Face token for gated/private repos; used by the frontend only",
        secret=True,
    )


@settings_class
class FrontendStagingSettings(StorageSettings, HuggingFaceSettings):
    """Staging modes of the frontend, S3, Hugging Face."""

    distributed_shared_models: bool = setting(
        "--distributed-shared-models",
        "LOCALAI_DISTRIBUTED_SHARED_MODELS",
        default=False,
        parse=parse_bool,
        help="every node mounts the models dir at the same path: skip staging, pass absolute paths",
        is_switch=True,
    )
    prehash_models: bool = setting(
        "--prehash-models",
        "CORRAL_PREHASH_MODELS",
        default=True,
        parse=parse_bool,
        help="hash configured model files without a recorded hash at start and on config edits (one thread, "
        "nice +10), so a model's first staging does not hash while it transfers",
    )


@settings_class
class WorkerFilesSettings:
    """The worker's staged files and file server: free space kept, request inputs, uploads, connections."""

    staging_min_free_bytes: int = setting(
        "--staging-min-free",
        "CORRAL_STAGING_MIN_FREE_BYTES",
        default=64 << 20,
        parse=parse_size_bytes,
        help="free space kept on the models filesystem; uploads that would eat it get 507",
    )
    ephemeral_staging_byte_limit: int = setting(
        "--ephemeral-staging-byte-limit",
        "LOCALAI_EPHEMERAL_STAGING_BYTE_LIMIT",
        default=0,
        parse=parse_size_bytes,
        help="bytes of request inputs (audio, images, ...) held at once below the ephemeral/ roots; an input "
        "past it gets 507 before any byte is written; 0 = 10% of the staging filesystem, at least 256 MiB",
    )
    ephemeral_staging_min_free_bytes: int = setting(
        "--ephemeral-staging-min-free-bytes",
        "LOCALAI_EPHEMERAL_STAGING_MIN_FREE_BYTES",
        default=0,
        parse=parse_size_bytes,
        help="free space a request input must leave on the staging filesystem (507 otherwise); "
        "0 = 5% of that filesystem, between 1 GiB and 10 GiB",
    )
    max_upload_bytes: int = setting(
        "--max-upload-size",
        "CORRAL_MAX_UPLOAD_BYTES",
        default=50 << 30,
        parse=parse_size_bytes,
        help="largest single file the file server accepts (413 above it)",
    )
    file_server_max_connections: int = setting(
        "--file-server-max-connections",
        "CORRAL_FILE_SERVER_MAX_CONNECTIONS",
        default=64,
        parse=_connection_count,
        help="connections the file server serves at once; more are answered 503 and closed",
    )
    file_server_header_timeout_s: float = setting(
        "--file-server-header-timeout",
        "CORRAL_FILE_SERVER_HEADER_TIMEOUT",
        default=30.0,
        parse=parse_positive_duration_s,
        help="a request header must arrive whole within this (also ends idle keep-alive connections)",
    )
    file_server_idle_timeout_s: float = setting(
        "--file-server-idle-timeout",
        "CORRAL_FILE_SERVER_IDLE_TIMEOUT",
        default=300.0,
        parse=parse_positive_duration_s,
        help="an upload body that sends nothing for this long is cut (bytes received are kept)",
    )


@settings_class
class WorkerStagingSettings(StorageSettings, WorkerFilesSettings):
    """Staging on a worker: S3 and its files."""
