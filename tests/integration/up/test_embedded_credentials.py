"""The embedded launcher: a PostgreSQL created with trust (an older `corral up` data dir) asks for
the password from the first start that has one; NATS with a password refuses anonymous clients."""

from __future__ import annotations

import secrets
from pathlib import Path

import asyncpg
import nats
import nats.errors
import pytest
from nats.aio.client import Client

from corral.up.embedded import embedded_nats, embedded_postgres


async def test_a_trusting_data_dir_requires_the_password_once_one_is_given(state_root: Path) -> None:
    data_dir = state_root / "pg-upgrade"
    old = embedded_postgres(data_dir, fsync=False)
    old.start()
    try:
        conn = await asyncpg.connect(f"postgresql://postgres@127.0.0.1:{old.port}/postgres")
        await conn.close()
    finally:
        old.stop()
    password = secrets.token_urlsafe(24)
    pg = embedded_postgres(data_dir, old.port, password=password, fsync=False)
    pg.start()
    try:
        with pytest.raises(asyncpg.InvalidPasswordError):
            await asyncpg.connect(f"postgresql://postgres@127.0.0.1:{pg.port}/postgres")
        conn = await asyncpg.connect(f"{pg.url_base}/postgres")
        try:
            assert await conn.fetchval("SHOW fsync") == "off"  # what this caller asked for, explicitly
        finally:
            await conn.close()
        assert (data_dir / "pg_hba.conf").stat().st_mode & 0o777 == 0o600
    finally:
        pg.stop()


async def test_a_nats_with_a_password_refuses_anonymous_clients(state_root: Path) -> None:
    server = embedded_nats(state_root / "nats-auth", password=secrets.token_urlsafe(24))
    server.start()
    try:
        anonymous = Client()
        try:
            with pytest.raises(nats.errors.Error, match="[Aa]uthorization"):
                await anonymous.connect(server.public_url, allow_reconnect=False, connect_timeout=5)
        finally:
            await anonymous.close()
        nc = await nats.connect(server.url, allow_reconnect=False)
        await nc.close()
        assert (state_root / "nats-auth" / "auth.conf").stat().st_mode & 0o777 == 0o600
        assert server.process is not None and server.password is not None
        args = server.process.args
        assert isinstance(args, list)
        assert server.password not in " ".join(args)
    finally:
        server.stop()
