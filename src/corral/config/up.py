"""Settings of `corral up` (the embedded default: PostgreSQL, NATS, a frontend and workers on this machine)."""

from __future__ import annotations

from corral.config.parse import (
    parse_bool,
    parse_nats_url,
    parse_non_negative_int,
    parse_path,
    parse_port,
    parse_postgres_url,
)
from corral.config.settings import Setting

UP_SETTINGS: tuple[Setting, ...] = (
    Setting("port", "--port", (), 8080, parse_port, "frontend HTTP port"),
    Setting("host", "--host", (), "127.0.0.1", help="frontend bind address"),
    Setting("workers", "--workers", (), 1, parse_non_negative_int, "number of worker processes"),
    Setting(
        "data_dir",
        "--data-dir",
        (),
        None,
        parse_path,
        "state directory: PostgreSQL, NATS, models, logs (default: /var/lib/corral as root, else "
        "$XDG_STATE_HOME/corral)",
    ),
    Setting(
        "database_url",
        "--database-url",
        ("LOCALAI_AUTH_DATABASE_URL",),
        None,
        parse_postgres_url,
        "use this PostgreSQL instead of starting one",
    ),
    Setting(
        "nats_url",
        "--nats-url",
        ("LOCALAI_NATS_URL",),
        None,
        parse_nats_url,
        "use this NATS instead of starting one",
    ),
    Setting(
        "worker_base_port",
        "--worker-base-port",
        (),
        50051,
        parse_port,
        "gRPC base port of the first worker; its file server listens one below",
    ),
    Setting(
        "models_path",
        "--models-path",
        (),
        None,
        parse_path,
        "frontend models directory (default: <data-dir>/models, with the default models)",
    ),
    Setting(
        "no_default_models",
        "--no-default-models",
        (),
        False,
        parse_bool,
        "do not prepare the default models",
        is_switch=True,
    ),
)
