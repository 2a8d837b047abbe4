"""Settings of node lifecycle, health and security (issue 5), appended to the frontend and worker tables."""

from __future__ import annotations

from corral.config.parse import (
    parse_bool,
    parse_duration_s,
    parse_int,
    parse_optional_postgres_url,
)
from corral.config.settings import Setting


def _nats_tls(prefix_help: str) -> tuple[Setting, ...]:
    return (
        Setting(
            "nats_tls_ca",
            "--nats-tls-ca",
            ("LOCALAI_NATS_TLS_CA",),
            "",
            help=f"CA bundle that signed the NATS server certificate ({prefix_help})",
        ),
        Setting(
            "nats_tls_cert",
            "--nats-tls-cert",
            ("LOCALAI_NATS_TLS_CERT",),
            "",
            help="client certificate for NATS mTLS (with --nats-tls-key)",
        ),
        Setting(
            "nats_tls_key",
            "--nats-tls-key",
            ("LOCALAI_NATS_TLS_KEY",),
            "",
            help="client private key for NATS mTLS (with --nats-tls-cert)",
        ),
    )


FRONTEND_LIFECYCLE_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "node_heartbeat_checkpoint_s",
        "--node-heartbeat-checkpoint",
        ("LOCALAI_NODE_HEARTBEAT_CHECKPOINT",),
        60.0,
        parse_duration_s,
        "a heartbeat that only refreshes the timestamp is written at most this often "
        "per node (below the worker's --heartbeat-interval: one write per beat)",
    ),
    Setting(
        "stale_node_threshold_s",
        "--stale-node-threshold",
        ("LOCALAI_STALE_NODE_THRESHOLD",),
        300.0,
        parse_duration_s,
        "a node without a fresh heartbeat for this long is marked offline "
        "(keep it well above --node-heartbeat-checkpoint)",
    ),
    Setting(
        "health_check_interval_s",
        "--health-check-interval",
        ("CORRAL_HEALTH_CHECK_INTERVAL",),
        15.0,
        parse_duration_s,
        "how often the health monitor looks for stale nodes",
    ),
    Setting(
        "auth",
        "--auth",
        ("LOCALAI_AUTH",),
        False,
        parse_bool,
        "require an API key (user or admin) on every route but /healthz, /readyz and the workers' /api/node/*",
        is_switch=True,
    ),
    Setting(
        "metrics_token",
        "--metrics-token",
        ("CORRAL_METRICS_TOKEN",),
        "",
        help="scrape token accepted on /metrics (Authorization: Bearer <token>); when set, or with --auth, "
        "/metrics needs it or an API key",
        secret=True,
    ),
    Setting(
        "bootstrap_admin_key",
        "--bootstrap-admin-key",
        ("LOCALAI_BOOTSTRAP_ADMIN_KEY",),
        "",
        help="admin API key stored (hashed) at first start; more keys via POST /api/keys",
        secret=True,
    ),
    Setting(
        "nats_account_seed",
        "--nats-account-seed",
        ("LOCALAI_NATS_ACCOUNT_SEED",),
        "",
        help="NATS account seed (SA...) used to mint worker credentials",
        secret=True,
    ),
    Setting(
        "nats_service_jwt",
        "--nats-service-jwt",
        ("LOCALAI_NATS_SERVICE_JWT",),
        "",
        help="the frontend's own NATS user JWT",
        secret=True,
    ),
    Setting(
        "nats_service_seed",
        "--nats-service-seed",
        ("LOCALAI_NATS_SERVICE_SEED",),
        "",
        help="seed (SU...) of the frontend's NATS user",
        secret=True,
    ),
    Setting(
        "nats_worker_jwt_ttl_s",
        "--nats-worker-jwt-ttl",
        ("LOCALAI_NATS_WORKER_JWT_TTL",),
        3600.0,
        parse_duration_s,
        "lifetime of minted worker NATS JWTs; live nodes refresh at three quarters of it, "
        "a deleted node's credentials stop working when it ends (the reference's default is 24h)",
    ),
    Setting(
        "nats_require_auth",
        "--nats-require-auth",
        ("LOCALAI_NATS_REQUIRE_AUTH",),
        False,
        parse_bool,
        "require the NATS service credential and account seed at start",
        is_switch=True,
    ),
    *_nats_tls("frontend"),
    Setting(
        "vector_store_database_url",
        "--agent-pool-database-url",
        ("LOCALAI_AGENT_POOL_DATABASE_URL",),
        "",
        parse_optional_postgres_url,
        "the agent vector store's database; must differ from the control plane's",
        secret=True,
    ),
)

WORKER_LIFECYCLE_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "nats_jwt",
        "--nats-jwt",
        ("LOCALAI_NATS_JWT",),
        "",
        help="static NATS user JWT (used as given, never refreshed)",
        secret=True,
    ),
    Setting(
        "nats_user_seed",
        "--nats-user-seed",
        ("LOCALAI_NATS_USER_SEED",),
        "",
        help="seed (SU...) of the static NATS user",
        secret=True,
    ),
    Setting(
        "nats_require_auth",
        "--nats-require-auth",
        ("LOCALAI_NATS_REQUIRE_AUTH",),
        False,
        parse_bool,
        "the bus requires credentials: wait for approval and minted credentials before connecting",
        is_switch=True,
    ),
    *_nats_tls("worker"),
    Setting(
        "state_dir",
        "--state-dir",
        ("CORRAL_WORKER_STATE_DIR",),
        "",
        help="where the worker keeps its node credential (mode 0600) so a restart registers as the same "
        "node (default: .corral-worker next to --models-path)",
    ),
    Setting(
        "register_max_attempts",
        "--register-max-attempts",
        ("CORRAL_REGISTER_MAX_ATTEMPTS",),
        100,
        parse_int,
        "registrations tried while waiting for approval/credentials before exiting non-zero",
    ),
    Setting(
        "drain_timeout_s",
        "--drain-timeout",
        ("CORRAL_DRAIN_TIMEOUT",),
        30.0,
        parse_duration_s,
        "on SIGTERM, how long to wait for in-flight requests to finish before deregistering",
    ),
    Setting(
        "sysfs_root",
        "--sysfs-root",
        ("CORRAL_SYSFS_ROOT",),
        "/sys",
        help="sysfs mount read for unified-memory SoC detection (devices/soc0/family, soc_id)",
    ),
)
