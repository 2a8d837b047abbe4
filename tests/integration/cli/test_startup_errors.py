"""A missing or malformed setting stops the process at start with one line naming it (no traceback)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _corral(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "corral", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
    )


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["run", "--nats-url", "nats://127.0.0.1:4222"], "missing required setting --database-url"),
        (["run", "--database-url", "postgresql://x@127.0.0.1/db"], "missing required setting --nats-url"),
        (["run", "--nats-url", "nats://x:1", "--database-url", "sqlite:///x.db"], "is not a PostgreSQL URL"),
        (["worker", "--nats-url", "nats://x:1"], "missing required setting --register-to"),
        (
            [
                "worker",
                "--register-to",
                "http://f:8080",
                "--nats-url",
                "nats://x:1",
                "--heartbeat-interval",
                "often",
            ],
            "invalid --heartbeat-interval / $LOCALAI_HEARTBEAT_INTERVAL",
        ),
        (["backend", "nope", "--addr", "127.0.0.1:1"], "nope"),
        (["agent-worker", "--nats-url", "nats://x:1"], "missing required setting --register-to"),
        (
            [
                "agent-worker",
                "--register-to",
                "http://f:8080",
                "--nats-url",
                "nats://x:1",
                "--mcp-tool-timeout",
                "0s",
            ],
            "invalid --mcp-tool-timeout / $CORRAL_MCP_TOOL_TIMEOUT",
        ),
        (
            [
                "agent-worker",
                "--register-to",
                "http://127.0.0.1:1",
                "--nats-url",
                "nats://x:1",
                "--nats-jwt",
                "j",
                "--state-dir",
                "/nonexistent/agent-state",
            ],
            "LOCALAI_NATS_JWT and LOCALAI_NATS_USER_SEED must be set together",
        ),
        (
            [
                "run",
                "--nats-url",
                "nats://x:1",
                "--database-url",
                "postgresql://x@h/db",
                "--mcp-max-iterations",
                "1000",
            ],
            "invalid --mcp-max-iterations / $CORRAL_MCP_MAX_ITERATIONS",
        ),
    ],
)
def test_bad_settings_stop_the_process_with_one_line(argv: list[str], needle: str) -> None:
    result = _corral(*argv)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_env_vars_configure_the_frontend_like_flags() -> None:
    result = _corral("run", env={"LOCALAI_NATS_URL": "nats://x:1", "DATABASE_URL": "mysql://nope"})
    assert result.returncode == 2 and "$DATABASE_URL" in result.stderr


def test_an_unreachable_database_is_one_line_not_a_traceback() -> None:
    result = _corral(
        "run", "--nats-url", "nats://127.0.0.1:1", "--database-url", "postgresql://x@127.0.0.1:1/db"
    )
    assert result.returncode == 1
    assert "cannot connect to PostgreSQL" in result.stderr and "Traceback" not in result.stderr


def test_help_lists_flags_env_vars_and_defaults() -> None:
    result = _corral("worker", "--help")
    assert result.returncode == 0
    for text in (
        "--register-to",
        "$LOCALAI_REGISTER_TO",
        "$LOCALAI_GRPC_MAX_PORT",
        "default: 10s",
        "$LOCALAI_ADVERTISE_HTTP_ADDR",
        "$LOCALAI_SERVE_ADDR",
    ):
        assert text in result.stdout
