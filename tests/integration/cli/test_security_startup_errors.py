"""NATS security settings that cannot work stop the frontend/worker with one line naming the setting,
and never echo the secret."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest

from corral.bus import natsauth

SECRET_LOOKING = "SUAMZ3NOTAREALSEEDBUTLOOKSLIKEONE"


def _corral(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "corral", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
    )


@pytest.mark.parametrize(
    "env, needle",
    [
        (
            {"LOCALAI_NATS_REQUIRE_AUTH": "true"},
            "LOCALAI_NATS_REQUIRE_AUTH=true needs LOCALAI_NATS_SERVICE_JWT",
        ),
        ({"LOCALAI_NATS_SERVICE_JWT": "eyJ.x.y"}, "must be set together"),
        (
            {"LOCALAI_NATS_SERVICE_JWT": "eyJ.x.y", "LOCALAI_NATS_SERVICE_SEED": SECRET_LOOKING},
            "LOCALAI_NATS_SERVICE_SEED is not a valid NATS nkey seed",
        ),
        (
            {"LOCALAI_NATS_ACCOUNT_SEED": natsauth.create_pair("user").seed},
            "LOCALAI_NATS_ACCOUNT_SEED is not a NATS account seed",
        ),
        ({"LOCALAI_NATS_TLS_CA": "/nonexistent/ca.pem"}, "cannot read LOCALAI_NATS_TLS_CA"),
    ],
)
def test_frontend_refuses_unusable_nats_security_settings(
    make_database: Callable[[], str], env: dict[str, str], needle: str
) -> None:
    result = _corral("run", "--nats-url", "nats://127.0.0.1:4222", "--database-url", make_database(), env=env)
    assert result.returncode == 2, result.stderr
    assert needle in result.stderr and "Traceback" not in result.stderr
    assert SECRET_LOOKING not in result.stderr
    for value in env.values():
        if value.startswith("SU"):
            assert value not in result.stderr
