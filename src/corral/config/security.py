"""Settings of node lifecycle, health and security (issue 5), mixed into the frontend and worker settings."""

from __future__ import annotations

from corral.config.parse import (
    parse_bool,
    parse_duration_s,
    parse_int,
    parse_optional_postgres_url,
)
from corral.config.settings import setting, settings_class


@settings_class
class NatsTlsClientSettings:
    """The client certificate of NATS mTLS."""

    nats_tls_cert: str = setting(
        "--nats-tls-cert",
        "LOCALAI_NATS_TLS_CERT",
        default="",
        help="client certificate for NATS mTLS (with --nats-tls-key)",
    )
    nats_tls_key: str = setting(
        "--nats-tls-key",
        "LOCALAI_NATS_TLS_KEY",
        default="",
        help="client private key for NATS mTLS (with --nats-tls-cert)",
    )


@settings_class
class FrontendNatsTlsSettings(NatsTlsClientSettings):
    """NATS TLS of the frontend."""

    nats_tls_ca: str = setting(
        "--nats-tls-ca",
        "LOCALAI_NATS_TLS_CA",
        default="",
        help="CA bundle that signed the NATS server certificate (frontend)",
    )


@settings_class
class WorkerNatsTlsSettings(NatsTlsClientSettings):
    """NATS TLS of a node agent (worker, agent worker)."""

    nats_tls_ca: str = setting(
        "--nats-tls-ca",
        "LOCALAI_NATS_TLS_CA",
        default="",
        help="CA bundle that signed the NATS server certificate (worker)",
    )


@settings_class
class VectorStoreSettings:
    """The agent vector store's database."""

    vector_store_database_url: str = setting(
        "--agent-pool-database-url",
        "LOCALAI_AGENT_POOL_DATABASE_URL",
        default="",
        parse=parse_optional_postgres_url,
        help="the agent vector store's database; must differ from the control plane's",
        secret=True,
    )


@settings_class
class FrontendLifecycleSettings(FrontendNatsTlsSettings, VectorStoreSettings):
    """Node heartbeats and health, API and metrics auth, NATS credentials of the frontend."""

    node_heartbeat_checkpoint_s: float = setting(
        "--node-heartbeat-checkpoint",
        "LOCALAI_NODE_HEARTBEAT_CHECKPOINT",
        default=60.0,
        parse=parse_duration_s,
        help="a heartbeat that only refreshes the timestamp is written at most this often "
        "per node (below the worker's --heartbeat-interval: one write per beat)",
    )
    stale_node_threshold_s: float = setting(
        "--stale-node-threshold",
        "LOCALAI_STALE_NODE_THRESHOLD",
        default=300.0,
        parse=parse_duration_s,
        help="a node without a fresh heartbeat for this long is marked offline "
        "(keep it well above --node-heartbeat-checkpoint)",
    )
    health_check_interval_s: float = setting(
        "--health-check-interval",
        "CORRAL_HEALTH_CHECK_INTERVAL",
        default=15.0,
        parse=parse_duration_s,
        help="how often the health monitor looks for stale nodes",
    )
    auth: bool = setting(
        "--auth",
        "LOCALAI_AUTH",
        default=False,
        parse=parse_bool,
        help="require an API key (user or admin) on every route but /healthz, /readyz and the workers' /api/node/*",
        is_switch=True,
    )
    metrics_token: str = setting(
        "--metrics-token",
        "CORRAL_METRICS_TOKEN",
        default="",
        help="scrape token accepted on /metrics (Authorization: Bearer <token>); when set, or with --auth, "
        "/metrics needs it or an API key",
        secret=True,
    )
    bootstrap_admin_key: str = setting(
        "--bootstrap-admin-key",
        "LOCALAI_BOOTSTRAP_ADMIN_KEY",
        default="",
        help="admin API key stored (hashed) at first start; more keys via POST /api/keys",
        secret=True,
    )
    nats_account_seed: str = setting(
        "--nats-account-seed",
        "LOCALAI_NATS_ACCOUNT_SEED",
        default="",
        help="NATS account seed (SA...) used to mint worker credentials",
        secret=True,
    )
    nats_service_jwt: str = setting(
        "--nats-service-jwt",
        "LOCALAI_NATS_SERVICE_JWT",
        default="",
        help="the frontend's own NATS user JWT",
        secret=True,
    )
    nats_service_seed: str = setting(
        "--nats-service-seed",
        "LOCALAI_NATS_SERVICE_SEED",
        default="",
        help="seed (SU...) of the frontend's NATS user",
        secret=True,
    )
    nats_worker_jwt_ttl_s: float = setting(
        "--nats-worker-jwt-ttl",
        "LOCALAI_NATS_WORKER_JWT_TTL",
        default=3600.0,
        parse=parse_duration_s,
        help="lifetime of minted worker NATS JWTs; live nodes refresh at three quarters of it, "
        "a deleted node's credentials stop working when it ends (the reference's default is 24h)",
    )
    nats_require_auth: bool = setting(
        "--nats-require-auth",
        "LOCALAI_NATS_REQUIRE_AUTH",
        default=False,
        parse=parse_bool,
        help="require the NATS service credential and account seed at start",
        is_switch=True,
    )


@settings_class
class NodeStateSettings:
    """A node agent's node credential, registration attempts and drain."""

    state_dir: str = setting(
        "--state-dir",
        "CORRAL_WORKER_STATE_DIR",
        default="",
        help="where the worker keeps its node credential (mode 0600) so a restart registers as the same "
        "node (default: .corral-worker next to --models-path)",
    )
    register_max_attempts: int = setting(
        "--register-max-attempts",
        "CORRAL_REGISTER_MAX_ATTEMPTS",
        default=100,
        parse=parse_int,
        help="registrations tried while waiting for approval/credentials before exiting non-zero",
    )
    drain_timeout_s: float = setting(
        "--drain-timeout",
        "CORRAL_DRAIN_TIMEOUT",
        default=30.0,
        parse=parse_duration_s,
        help="on SIGTERM, how long to wait for in-flight requests to finish before deregistering",
    )


@settings_class
class NodeLifecycleSettings(WorkerNatsTlsSettings, NodeStateSettings):
    """What every node agent (worker, agent worker) has: NATS credentials and TLS, its node credential's
    directory, registration attempts, drain timeout."""

    nats_jwt: str = setting(
        "--nats-jwt",
        "LOCALAI_NATS_JWT",
        default="",
        help="static NATS user JWT (used as given, never refreshed)",
        secret=True,
    )
    nats_user_seed: str = setting(
        "--nats-user-seed",
        "LOCALAI_NATS_USER_SEED",
        default="",
        help="seed (SU...) of the static NATS user",
        secret=True,
    )
    nats_require_auth: bool = setting(
        "--nats-require-auth",
        "LOCALAI_NATS_REQUIRE_AUTH",
        default=False,
        parse=parse_bool,
        help="the bus requires credentials: wait for approval and minted credentials before connecting",
        is_switch=True,
    )


@settings_class
class HardwareSettings:
    """Where a worker reads hardware facts."""

    sysfs_root: str = setting(
        "--sysfs-root",
        "CORRAL_SYSFS_ROOT",
        default="/sys",
        help="sysfs mount read for unified-memory SoC detection (devices/soc0/family, soc_id)",
    )


@settings_class
class WorkerLifecycleSettings(NodeLifecycleSettings, HardwareSettings):
    """Node lifecycle, health and security of a worker."""
