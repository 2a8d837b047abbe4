"""Settings of `corral up` (the embedded default: PostgreSQL, NATS, a frontend and workers on this machine)."""

from __future__ import annotations

from pathlib import Path

from corral.config.parse import (
    parse_bool,
    parse_nats_url,
    parse_non_negative_int,
    parse_path,
    parse_port,
    parse_postgres_url,
)
from corral.config.settings import setting, settings_class


@settings_class
class UpSettings:
    """`corral up`."""

    port: int = setting("--port", default=8080, parse=parse_port, help="frontend HTTP port")
    host: str = setting("--host", default="127.0.0.1", help="frontend bind address")
    workers: int = setting(
        "--workers", default=1, parse=parse_non_negative_int, help="number of worker processes"
    )
    data_dir: Path | None = setting(
        "--data-dir",
        default=None,
        parse=parse_path,
        help="state directory: PostgreSQL, NATS, models, logs (default: /var/lib/corral as root, else "
        "$XDG_STATE_HOME/corral)",
    )
    database_url: str | None = setting(
        "--database-url",
        "LOCALAI_AUTH_DATABASE_URL",
        default=None,
        parse=parse_postgres_url,
        help="use this PostgreSQL instead of starting one",
    )
    nats_url: str | None = setting(
        "--nats-url",
        "LOCALAI_NATS_URL",
        default=None,
        parse=parse_nats_url,
        help="use this NATS instead of starting one",
    )
    worker_base_port: int = setting(
        "--worker-base-port",
        default=50051,
        parse=parse_port,
        help="gRPC base port of the first worker; its file server listens one below",
    )
    models_path: Path | None = setting(
        "--models-path",
        default=None,
        parse=parse_path,
        help="frontend models directory (default: <data-dir>/models, with the default models)",
    )
    no_default_models: bool = setting(
        "--no-default-models",
        default=False,
        parse=parse_bool,
        help="do not prepare the default models",
        is_switch=True,
    )
