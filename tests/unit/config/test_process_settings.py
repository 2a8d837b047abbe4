"""Settings shared by frontend and worker: the slow-callback threshold and the number of HTTP processes."""

from __future__ import annotations

import pytest

from corral.config.errors import ConfigError
from corral.config.frontend import FrontendSettings
from corral.config.settings import load
from corral.config.worker import WorkerSettings
from corral.frontend.http_workers import run_http_workers

BASE = ["--nats-url", "nats://127.0.0.1:4222", "--database-url", "postgresql://x@127.0.0.1/db"]


def test_http_workers_and_slow_callback_default_to_one_process_and_100_ms() -> None:
    settings = load(FrontendSettings, "corral run", "", BASE, environ={})

    assert (settings.http_workers, settings.slow_callback_ms) == (1, 100)


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--http-workers", "0"],
            "invalid --http-workers / $CORRAL_HTTP_WORKERS (from --http-workers): "
            "http workers '0' is out of range; use 1 to 64",
        ),
        (
            ["--slow-callback-ms", "0"],
            "invalid --slow-callback-ms / $CORRAL_SLOW_CALLBACK_MS (from --slow-callback-ms): "
            "slow-callback threshold '0' ms is out of range; use 1 to 60000",
        ),
    ],
)
def test_out_of_range_values_name_the_flag_and_the_range(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(FrontendSettings, "corral run", "", [*BASE, *argv], environ={})
    assert str(info.value) == message


def test_the_worker_reads_the_slow_callback_threshold_from_its_env_var() -> None:
    settings = load(
        WorkerSettings,
        "corral worker",
        "",
        ["--register-to", "http://127.0.0.1:8080", BASE[0], BASE[1]],
        environ={"CORRAL_SLOW_CALLBACK_MS": "250"},
    )

    assert settings.slow_callback_ms == 250


def test_several_http_processes_need_a_fixed_port() -> None:
    settings = FrontendSettings(
        nats_url="nats://127.0.0.1:4222",
        database_url="postgresql://x@127.0.0.1/db",
        address=("127.0.0.1", 0),
        http_workers=2,
    )

    with pytest.raises(ConfigError) as info:
        run_http_workers(settings, [])
    assert str(info.value) == (
        "--http-workers 2 needs a fixed port in --address (got 127.0.0.1:0): each process binds the same port"
    )
