"""The image's scripts, run for real: entrypoint (mode dispatch), healthcheck (endpoint per mode), drain."""

from __future__ import annotations

import http.server
import importlib.util
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import corral
from support.deploy_files import REPO

DOCKER = REPO / "deploy" / "docker"


def _healthcheck_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("corral_healthcheck", DOCKER / "healthcheck.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


healthcheck = _healthcheck_module()


@pytest.fixture
def image_env(tmp_path: Path) -> dict[str, str]:
    """PATH with a `corral` that runs this checkout's corral (as the image's venv does), a private run dir."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    corral_bin = bin_dir / "corral"
    corral_bin.write_text(f'#!/bin/sh\nexec {sys.executable} -m corral "$@"\n')
    corral_bin.chmod(0o755)
    env = {
        key: value for key, value in os.environ.items() if not key.startswith(("LOCALAI_", "HEALTHCHECK_"))
    }
    return {**env, "PATH": f"{bin_dir}:{env['PATH']}", "CORRAL_RUN_DIR": str(tmp_path / "run")}


def _entrypoint(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(DOCKER / "entrypoint.sh"), *argv], capture_output=True, text=True, env=env, timeout=120
    )


def test_entrypoint_version_runs_corral(image_env: dict[str, str]) -> None:
    result = _entrypoint(image_env, "--version")
    assert (result.returncode, result.stdout) == (0, f"corral {corral.__version__}\n")


def test_entrypoint_worker_mode_runs_corral_worker_and_records_the_mode(image_env: dict[str, str]) -> None:
    result = _entrypoint(image_env, "worker", "--help")
    assert result.returncode == 0
    assert result.stdout.startswith("usage: corral worker")
    run_dir = Path(image_env["CORRAL_RUN_DIR"])
    assert (run_dir / "corral-mode").read_text() == "worker\n"
    assert (run_dir / "corral.pid").read_text().strip().isdigit()


def test_entrypoint_flags_alone_mean_run(image_env: dict[str, str]) -> None:
    result = _entrypoint(image_env, "--log-level", "info")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "corral run: missing required setting --nats-url / $LOCALAI_NATS_URL: "
        "NATS server URL (nats:// or tls://)"
    )
    assert (Path(image_env["CORRAL_RUN_DIR"]) / "corral-mode").read_text() == "run\n"


def test_entrypoint_passes_agent_worker_to_corral(image_env: dict[str, str]) -> None:
    """The image accepts `agent-worker` and runs `corral agent-worker` (here: without its required flags)."""
    result = _entrypoint(image_env, "agent-worker")
    assert result.returncode == 2
    assert result.stderr.startswith("corral agent-worker: missing required setting --register-to")
    assert (Path(image_env["CORRAL_RUN_DIR"]) / "corral-mode").read_text() == "agent-worker\n"


def test_entrypoint_runs_any_other_command_as_given(image_env: dict[str, str]) -> None:
    result = _entrypoint(image_env, "sh", "-c", "echo plain")
    assert (result.returncode, result.stdout) == (0, "plain\n")


@pytest.mark.slow
def test_entrypoint_prepares_the_default_models_before_run_when_asked(
    image_env: dict[str, str], tmp_path: Path
) -> None:
    models = tmp_path / "models"
    env = {**image_env, "CORRAL_PREPARE_DEFAULT_MODELS": "true", "LOCALAI_MODELS_PATH": str(models)}
    result = _entrypoint(env, "run")
    assert result.returncode == 2  # no NATS URL: run stops after the models are in place
    assert sorted(path.name for path in models.glob("*.yaml")) == [
        "all-minilm-l6-v2.yaml",
        "gemma-3-270m.yaml",
        "piper-joe.yaml",
        "tiny-diffusion.yaml",
        "tiny-reranker.yaml",
        "whisper-base.yaml",
    ]


@pytest.mark.parametrize(
    "mode, env, url",
    [
        ("run", {}, "http://127.0.0.1:8080/readyz"),
        ("run", {"LOCALAI_ADDRESS": "0.0.0.0:9090"}, "http://127.0.0.1:9090/readyz"),
        ("worker", {}, "http://127.0.0.1:50050/readyz"),  # base port 50051 - 1
        ("worker", {"LOCALAI_SERVE_ADDR": "0.0.0.0:6001"}, "http://127.0.0.1:6000/readyz"),
        (
            "worker",
            {"LOCALAI_ADDR": "10.0.0.5:7001", "LOCALAI_SERVE_ADDR": "0.0.0.0:6001"},
            "http://127.0.0.1:7000/readyz",
        ),  # --addr wins over --serve-addr, as in corral worker
        ("worker", {"LOCALAI_HTTP_ADDR": "0.0.0.0:5555"}, "http://127.0.0.1:5555/readyz"),
        ("worker", {"HEALTHCHECK_ENDPOINT": "http://10.1.1.1:1/x"}, "http://10.1.1.1:1/x"),
        ("agent-worker", {}, None),  # no HTTP endpoint: the process must be alive
    ],
)
def test_healthcheck_probes_the_endpoint_of_the_mode(mode: str, env: dict[str, str], url: str | None) -> None:
    assert healthcheck.endpoint_for(mode, env) == url


class _StatusHandler(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/readyz" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def readyz_server() -> Iterator[tuple[http.server.ThreadingHTTPServer, type[_StatusHandler]]]:
    handler = type("Handler", (_StatusHandler,), {"status": 200})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, handler
    server.shutdown()
    server.server_close()


def _run_healthcheck(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(DOCKER / "healthcheck.py")], capture_output=True, text=True, env=env, timeout=30
    )


def test_healthcheck_reports_the_worker_readyz_answer(
    readyz_server: tuple[http.server.ThreadingHTTPServer, type[_StatusHandler]],
    image_env: dict[str, str],
    tmp_path: Path,
) -> None:
    server, handler = readyz_server
    port = server.server_address[1]
    run_dir = Path(image_env["CORRAL_RUN_DIR"])
    run_dir.mkdir()
    (run_dir / "corral-mode").write_text("worker\n")
    env = {**image_env, "LOCALAI_HTTP_ADDR": f"0.0.0.0:{port}"}
    healthy = _run_healthcheck(env)
    assert (healthy.returncode, healthy.stdout) == (0, f"healthy http://127.0.0.1:{port}/readyz: 200\n")
    handler.status = 503
    unhealthy = _run_healthcheck(env)
    assert (unhealthy.returncode, unhealthy.stdout) == (1, f"unhealthy http://127.0.0.1:{port}/readyz: 503\n")


def test_healthcheck_without_http_endpoint_follows_the_process(
    image_env: dict[str, str], tmp_path: Path
) -> None:
    run_dir = Path(image_env["CORRAL_RUN_DIR"])
    run_dir.mkdir()
    (run_dir / "corral-mode").write_text("agent-worker\n")
    (run_dir / "corral.pid").write_text(f"{os.getpid()}\n")
    alive = _run_healthcheck(image_env)
    assert (alive.returncode, alive.stdout) == (0, "healthy mode agent-worker: process alive\n")
    gone = subprocess.Popen(["true"])
    gone.wait()
    (run_dir / "corral.pid").write_text(f"{gone.pid}\n")
    dead = _run_healthcheck(image_env)
    assert (dead.returncode, dead.stdout) == (1, "unhealthy mode agent-worker: process not running\n")


DRAINING_PROCESS = """
import signal, sys, time
def drain(signum, frame):
    time.sleep(1.0)  # finishing in-flight work
    sys.exit(0)
signal.signal(signal.SIGTERM, drain)
print("ready", flush=True)
time.sleep(60)
"""


def test_drain_sends_sigterm_and_returns_only_once_the_process_has_exited(
    image_env: dict[str, str], tmp_path: Path
) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", DRAINING_PROCESS], stdout=subprocess.PIPE, text=True
    ) as process:
        try:
            assert process.stdout is not None and process.stdout.readline() == "ready\n"
            run_dir = Path(image_env["CORRAL_RUN_DIR"])
            run_dir.mkdir()
            (run_dir / "corral.pid").write_text(f"{process.pid}\n")
            reaper = threading.Thread(target=process.wait)  # tini's job in the image: reap the exited child
            reaper.start()
            drain = subprocess.run([str(DOCKER / "drain.sh")], env=image_env, timeout=30)
            assert drain.returncode == 0
            assert process.poll() == 0  # exited through its SIGTERM handler before drain returned
            reaper.join()
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait()


def test_drain_without_a_recorded_process_succeeds(image_env: dict[str, str]) -> None:
    assert subprocess.run([str(DOCKER / "drain.sh")], env=image_env, timeout=30).returncode == 0
