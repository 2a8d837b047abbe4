"""Security-related checks and set-up at frontend start: NATS credentials/TLS, the bootstrap
admin key, and the warning about sharing the control-plane database with the vector store."""

from __future__ import annotations

import logging
from typing import Any

import asyncpg

from corral.bus.natsauth import NatsAuthError
from corral.bus.security import NatsCredentials, TlsFiles
from corral.config.errors import ConfigError
from corral.store import api_keys
from corral.store.xmin_gauge import same_database

log = logging.getLogger(__name__)


def frontend_nats_options(settings: Any) -> dict[str, Any]:
    """`credentials` and `tls` for `bus.connect`; a ConfigError names the setting that is wrong."""
    has_service = bool(settings.nats_service_jwt or settings.nats_service_seed)
    if settings.nats_require_auth and not (
        settings.nats_service_jwt and settings.nats_service_seed and settings.nats_account_seed
    ):
        raise ConfigError(
            "LOCALAI_NATS_REQUIRE_AUTH=true needs LOCALAI_NATS_SERVICE_JWT, "
            "LOCALAI_NATS_SERVICE_SEED and LOCALAI_NATS_ACCOUNT_SEED (see `corral nats-auth-setup`)"
        )
    if has_service and not (settings.nats_service_jwt and settings.nats_service_seed):
        raise ConfigError("LOCALAI_NATS_SERVICE_JWT and LOCALAI_NATS_SERVICE_SEED must be set together")
    try:
        credentials = (
            NatsCredentials.static(
                settings.nats_service_jwt, settings.nats_service_seed, setting="LOCALAI_NATS_SERVICE_SEED"
            )
            if has_service
            else None
        )
        tls = TlsFiles(settings.nats_tls_ca, settings.nats_tls_cert, settings.nats_tls_key)
        tls.context(settings.nats_url)
    except NatsAuthError as exc:
        raise ConfigError(str(exc)) from None
    return {"credentials": credentials, "tls": tls}


async def bootstrap_admin_key(pool: asyncpg.Pool, key: str) -> None:
    """Store the bootstrap admin key's hash once; a revoked bootstrap key stays revoked."""
    if key:
        if await api_keys.insert(pool, key, name="bootstrap", role=api_keys.ADMIN) is not None:
            log.info("bootstrap admin key stored (LOCALAI_BOOTSTRAP_ADMIN_KEY)")
    elif await api_keys.live_admin_count(pool) == 0:
        log.warning(
            "no admin API key exists: /api/nodes, /api/keys and /api/settings refuse every call; "
            "set LOCALAI_BOOTSTRAP_ADMIN_KEY"
        )


def warn_shared_vector_store(settings: Any) -> None:
    if same_database(settings.database_url, settings.vector_store_database_url):
        log.warning(
            "the control-plane database (LOCALAI_AUTH_DATABASE_URL) is the same database as the vector "
            "store (LOCALAI_AGENT_POOL_DATABASE_URL): a long transaction there stops autovacuum from "
            "reclaiming the node registry; give the control plane a database of its own"
        )
