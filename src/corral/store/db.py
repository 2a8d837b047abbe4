"""PostgreSQL pool and forward-only migrations applied under advisory lock 105."""

from __future__ import annotations

import logging
import re
from importlib import resources

import asyncpg

from corral.store.locks import KEY_SCHEMA_MIGRATE

log = logging.getLogger(__name__)

_MIGRATION_RE = re.compile(r"^(\d{4})_(\w+)\.sql$")


class DatabaseUnavailable(Exception):
    """PostgreSQL could not be reached; check LOCALAI_AUTH_DATABASE_URL and that the server is up."""


def _migrations() -> list[tuple[int, str, str]]:
    found = []
    for entry in resources.files("corral.store").joinpath("migrations").iterdir():
        match = _MIGRATION_RE.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.read_text()))
    return sorted(found)


async def migrate(pool: asyncpg.Pool) -> list[str]:
    """Apply pending migrations in order; two frontends starting at once serialise on the lock."""
    applied: list[str] = []
    async with pool.acquire() as conn:
        await conn.execute("SELECT pg_advisory_lock($1)", KEY_SCHEMA_MIGRATE)
        try:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS corral_schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {r["version"] for r in await conn.fetch("SELECT version FROM corral_schema_migrations")}
            for version, name, sql in _migrations():
                if version in done:
                    continue
                async with conn.transaction():
                    await conn.execute(sql)
                    await conn.execute(
                        "INSERT INTO corral_schema_migrations (version, name) VALUES ($1, $2)", version, name
                    )
                log.info("applied migration %s", name)
                applied.append(name)
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", KEY_SCHEMA_MIGRATE)
    return applied


async def connect(url: str, *, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
    try:
        pool = await asyncpg.create_pool(url, min_size=min_size, max_size=max_size, command_timeout=30)
    except (OSError, asyncpg.PostgresError) as exc:
        raise DatabaseUnavailable(f"cannot connect to PostgreSQL at {redact(url)}: {exc}") from None
    if pool is None:
        raise DatabaseUnavailable(f"cannot connect to PostgreSQL at {redact(url)}")
    return pool


def redact(url: str) -> str:
    """Hide the password of a database URL before it reaches a log line or an error."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)
